import CoreMetrics
import NIOCore
import Synchronization

/// The open connections of a listener, shared with its child channel initializer before the
/// server object exists: admission against a limit, and the list to close on shutdown.
final class ConnectionRegistry: Sendable {
    private struct Connections {
        var channels: [ObjectIdentifier: any Channel] = [:]
        var isShuttingDown = false
    }

    private let connections = Mutex(Connections())
    private let gauge: Meter?

    init(gauge: Meter? = nil) {
        self.gauge = gauge
    }

    var count: Int {
        self.connections.withLock { $0.channels.count }
    }

    /// Registers the channel (and unregisters it when it closes), unless the listener is
    /// shutting down or at its limit.
    func admit(_ channel: any Channel, limit: Int) -> Bool {
        let admitted = self.connections.withLock { connections in
            guard !connections.isShuttingDown, connections.channels.count < limit else { return false }
            connections.channels[ObjectIdentifier(channel)] = channel
            return true
        }
        if admitted {
            self.gauge?.increment()
            channel.closeFuture.whenComplete { _ in
                _ = self.connections.withLock { $0.channels.removeValue(forKey: ObjectIdentifier(channel)) }
                self.gauge?.decrement()
            }
        }
        return admitted
    }

    /// Admits no more connections; returns the open ones.
    func closeAdmission() -> [any Channel] {
        self.connections.withLock { connections in
            connections.isShuttingDown = true
            return Array(connections.channels.values)
        }
    }
}
