import BridgeCore
import BridgeForwarding
import Crypto
import DevelopmentPKI
import Foundation
import LegacyClient
import LegacyProtocol
import Logging
import MetricsTestKit
import MockAPNs
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import UpstreamAPNs

/// A clock tests move by hand (authentication-token ages, 410 timestamps).
package final class TestClock: Sendable {
    private let current: Mutex<Date>

    package init(_ start: Date = Date()) {
        self.current = Mutex(start)
    }

    package var now: Date { self.current.withLock { $0 } }

    package func advance(by interval: TimeInterval) {
        self.current.withLock { $0 += interval }
    }

    package var function: @Sendable () -> Date { { self.now } }
}
