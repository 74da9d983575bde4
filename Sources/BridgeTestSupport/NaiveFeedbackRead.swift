import DevelopmentPKI
import Foundation
import NIOCore

/// The result of the habits script's `naive-feedback`.
package struct NaiveFeedbackRead: Decodable, Sendable {
    package var tuples: Int
    package var short_reads: Int
    package var distinct: Int
}
