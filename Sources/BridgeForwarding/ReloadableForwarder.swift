import BridgeCore
import LegacyProtocol
import Logging
import NIOCore
import Synchronization
import UpstreamAPNs

/// The forwarder of a running bridge: one ``APNsForwarder`` (its APNs clients) per set
/// of credentials, by name, where a configuration reload can add, replace or remove them.
///
/// A notification goes to the client in force when it is sent and stays with it through its
/// retries. A replaced or removed client is retired: it takes nothing new, and it is shut down
/// once its last notification has its outcome, so a reload loses nothing in flight.
public final class ReloadableForwarder: NotificationForwarder {
    /// One client and the notifications it has not answered yet.
    public final class Member: Sendable {
        public let name: String
        public let client: APNsForwarder
        /// The notifications in flight, and ``retiredFlag`` once the client is retired: one
        /// atomic, not a lock, since it is counted twice per notification.
        private let state = Atomic<Int>(0)
        private static let retiredFlag = 1 << 62

        init(name: String, client: APNsForwarder) {
            self.name = name
            self.client = client
        }

        /// Counts a notification in; `false` once the client is retired.
        fileprivate func begin() -> Bool {
            var current = self.state.load(ordering: .relaxed)
            while true {
                guard current & Self.retiredFlag == 0 else { return false }
                let (exchanged, original) = self.state.compareExchange(
                    expected: current,
                    desired: current + 1,
                    ordering: .acquiringAndReleasing
                )
                if exchanged { return true }
                current = original
            }
        }

        /// Counts a notification out; the last one of a retired client shuts it down.
        fileprivate func end() {
            let now = self.state.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue
            if now == Self.retiredFlag { self.client.shutdown() }
        }

        /// Takes nothing new; shuts down now or when the last notification is answered.
        fileprivate func retire() {
            let before = self.state.bitwiseOr(Self.retiredFlag, ordering: .acquiringAndReleasing).oldValue
            if before == 0 { self.client.shutdown() }  // not retired before, and nothing in flight
        }

        /// Notifications sent through this client that have no outcome yet.
        public var inFlight: Int {
            self.state.load(ordering: .acquiring) & ~Self.retiredFlag
        }
    }

    private struct Clients {
        var members: [String: Member]
        var defaultCredentials: String
        /// `members[defaultCredentials]`: most tenants name no credentials, and their lookup
        /// then hashes no name.
        var defaultMember: Member

        init(members: [String: Member], defaultCredentials: String) {
            guard let defaultMember = members[defaultCredentials] else {
                preconditionFailure("the default credentials must be one of the clients")
            }
            self.members = members
            self.defaultCredentials = defaultCredentials
            self.defaultMember = defaultMember
        }

        func member(named name: String?) -> Member? {
            guard let name else { return self.defaultMember }
            return self.members[name]
        }
    }

    private let clients: Mutex<Clients>

    /// - Parameter defaultCredentials: the name used for tenants that name none; a key of
    ///   `clients`.
    public init(clients: [String: APNsForwarder], defaultCredentials: String) {
        let members = Dictionary(uniqueKeysWithValues: clients.map { ($0.key, Member(name: $0.key, client: $0.value)) })
        self.clients = Mutex(Clients(members: members, defaultCredentials: defaultCredentials))
    }

    /// The clients in force now, by credentials name.
    public var members: [String: Member] {
        self.clients.withLock { $0.members }
    }

    public var defaultCredentials: String {
        self.clients.withLock { $0.defaultCredentials }
    }

    /// Puts `replacements` in force (new names, or new clients for existing names), removes the
    /// clients `removed` names, and sets the default; the clients they displace are retired.
    public func update(
        replacing replacements: [String: APNsForwarder],
        removing removed: Set<String>,
        defaultCredentials: String
    ) {
        let retired: [Member] = self.clients.withLock { clients in
            var retired: [Member] = []
            for (name, client) in replacements {
                if let old = clients.members.updateValue(Member(name: name, client: client), forKey: name) {
                    retired.append(old)
                }
            }
            for name in removed {
                if let old = clients.members.removeValue(forKey: name) {
                    retired.append(old)
                }
            }
            clients = Clients(members: clients.members, defaultCredentials: defaultCredentials)
            return retired
        }
        for member in retired {
            member.retire()
        }
    }

    public func send(
        _ notification: ForwardedNotification,
        on eventLoop: any EventLoop,
        completion: @escaping @Sendable (NotificationOutcome) -> Void
    ) {
        // A client retired between the lookup and `begin` takes nothing: look again.
        while true {
            let member = self.clients.withLock { $0.member(named: notification.tenant.credentials) }
            guard let member else {
                // A tenant naming credentials that a reload removed (the reload refuses that for
                // configured tenants; a connection opened before it may still name them).
                completion(.gaveUp(.processingError))
                return
            }
            guard member.begin() else { continue }
            member.client.send(notification, on: eventLoop) { outcome in
                member.end()
                completion(outcome)
            }
            return
        }
    }

    /// Closes every client at once (the end of the process).
    public func shutdown() {
        for member in self.members.values {
            member.client.shutdown()
        }
    }

    /// ``shutdown()``, then waits until every client's connections are closed.
    public func shutdownAndWait() async {
        self.shutdown()
        for member in self.members.values {
            await member.client.shutdownAndWait()
        }
    }
}
