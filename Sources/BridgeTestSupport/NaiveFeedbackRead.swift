import DevelopmentPKI
import Foundation
import NIOCore

/// The result of the habits script's `naive-feedback`.
public struct NaiveFeedbackRead: Decodable, Sendable {
    public var tuples: Int
    public var short_reads: Int
    public var distinct: Int
}
