import BridgeApp
import BridgeTestSupport
import NIOCore
import ServiceLifecycle
import ServiceLifecycleTestKit
import Synchronization
import Testing

/// `serve`'s `ready` as a service of the group (``ReadyService``), under swift-service-lifecycle's
/// test kit: when `ready` runs, what its failure becomes, and what a graceful shutdown does to
/// it before and while it runs.
@Suite("Ready service", .timeLimit(.minutes(2)))
struct ReadyServiceTests {
    static let gateway = try! SocketAddress(ipAddress: "127.0.0.1", port: 2195)
    static let feedback = try! SocketAddress(ipAddress: "127.0.0.1", port: 2196)
    static let admin = try! SocketAddress(ipAddress: "127.0.0.1", port: 8080)

    /// A ready service whose running bridge is its addresses.
    static func service(
        expectsAdmin: Bool = true,
        ready: @escaping @Sendable (ListeningAddresses) async throws -> Void
    ) -> (ReadyService<ListeningAddresses>, AsyncStream<ListeningAddresses.Listener>.Continuation) {
        let (listening, listened) = AsyncStream.makeStream(of: ListeningAddresses.Listener.self)
        let service = ReadyService(listening: listening, expectsAdmin: expectsAdmin, running: { $0 }, ready: ready)
        return (service, listened)
    }

    @Test("ready runs once every listener has reported, with every address; the service then stays until its shutdown")
    func readyAfterEveryListener() async throws {
        let (readied, ran) = AsyncStream.makeStream(of: ListeningAddresses.self)
        let (service, listened) = Self.service { addresses in ran.yield(addresses) }
        let got = try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await service.run() }
                listened.yield(.feedback(Self.feedback))
                listened.yield(.admin(Self.admin))
                listened.yield(.gateway(Self.gateway))
                var iterator = readied.makeAsyncIterator()
                let got = await iterator.next()
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
                return got
            }
        }
        let addresses = try #require(got)
        #expect(addresses.gateway == Self.gateway)
        #expect(addresses.feedback == Self.feedback)
        #expect(addresses.admin == Self.admin, "the admin port was expected: ready waited for it")
    }

    @Test("A graceful shutdown before every listener is up (one could not bind) ends the service; ready never runs")
    func shutdownBeforeListeners() async throws {
        let ran = Mutex(false)
        let (service, listened) = Self.service { _ in ran.withLock { $0 = true } }
        try await testGracefulShutdown { trigger in
            listened.yield(.gateway(Self.gateway))
            listened.yield(.feedback(Self.feedback))
            trigger.triggerGracefulShutdown()
            try await service.run()
        }
        #expect(!ran.withLock { $0 })
    }

    @Test("A ready that throws fails the service with its error, as ReadyService.Failure")
    func readyThrows() async throws {
        struct Refused: Error {}
        let (service, listened) = Self.service(expectsAdmin: false) { _ in throw Refused() }
        listened.yield(.gateway(Self.gateway))
        listened.yield(.feedback(Self.feedback))
        await testGracefulShutdown { _ in
            let error = await #expect(throws: ReadyService<ListeningAddresses>.Failure.self) {
                try await service.run()
            }
            #expect(error?.error is Refused)
        }
    }

    @Test(
        "A graceful shutdown while ready runs cancels it; the service returns without an error",
        // A ready left running would keep the service for its hour: a bound on that hang.
        .timeLimit(.minutes(1))
    )
    func shutdownCancelsReady() async throws {
        let (started, start) = AsyncStream.makeStream(of: Void.self)
        let (service, listened) = Self.service(expectsAdmin: false) { _ in
            start.yield()
            // Until cancelled: a demo's round trip when SIGTERM comes.
            try await Task.sleep(for: .seconds(3600))
        }
        listened.yield(.gateway(Self.gateway))
        listened.yield(.feedback(Self.feedback))
        try await testGracefulShutdown { trigger in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await service.run() }
                var iterator = started.makeAsyncIterator()
                await iterator.next()
                trigger.triggerGracefulShutdown()
                try await group.waitForAll()
            }
        }
    }
}
