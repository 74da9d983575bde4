import BridgeCore
import BridgeStores
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A PostgreSQL server of one test's own, which the test can stop (`pg_ctl stop -m fast`), kill
/// (SIGKILL to the postmaster) and start again on the same data: what an operator's PostgreSQL
/// does in a minor-version upgrade, a managed database's maintenance or a crash. The shared test
/// server (`APNS_BRIDGE_TEST_POSTGRES_URL`) cannot be stopped under the other tests.
///
/// Needs PostgreSQL's server programs (Debian: `postgresql`; `.ci/run` installs them). It
/// listens on a unix socket in its own folder only, without fsync; as root it runs as the
/// `postgres` user, since initdb refuses root. ``remove()`` stops it and deletes the folder.
package final class PostgresCluster: Sendable {
    package let directory: String
    private let binaries: String
    private let user: String
    /// Its own port number (on its unix socket only): PostgreSQL derives its shared memory and
    /// semaphore keys from the port, and two clusters of concurrent tests on the same number
    /// (one of them being killed and restarted) were seen to hang a start.
    private let port: Int
    /// The postmasters started (each one's `runuser` when root), kept until they end.
    private let servers = Mutex<[Process]>([])

    /// `postgres://…?host=<socket folder>` for the `postgres` database.
    package var url: String {
        "postgres://\(self.user)@localhost:\(self.port)/postgres?host=\(self.directory)&sslmode=disable"
    }

    /// Runs `body` (a test that stops or kills its server) when no other such test runs: in full
    /// test runs, two of them restarting their servers at the same time in this one process have
    /// hung until their time limits (never in a run of their own; the cause is not found). A
    /// bridge process has one store, so a production process never restarts with another beside
    /// it.
    package static func oneOutageAtATime(_ body: () async throws -> Void) async throws {
        try await Self.outages.withLock(body)
    }

    private static let outages = AsyncSerialLock()

    /// The folder of `initdb` and `pg_ctl`, if PostgreSQL's server programs are installed.
    package static var binaries: String? {
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        return
            versions
            .sorted { $0.compare($1, options: .numeric) == .orderedDescending }
            .map { "/usr/lib/postgresql/\($0)/bin" }
            .first { FileManager.default.isExecutableFile(atPath: "\($0)/initdb") }
    }

    private init(directory: String, binaries: String, user: String, port: Int) {
        self.directory = directory
        self.binaries = binaries
        self.user = user
        self.port = port
    }

    /// Creates a cluster in a new folder and starts it.
    package static func start() async throws -> PostgresCluster {
        guard let binaries = Self.binaries else { throw Failed(what: "find PostgreSQL's server programs", detail: "") }
        let isRoot = getuid() == 0
        // Not in the tests' temporary folder: the `postgres` user must be able to reach it.
        let directory = "/tmp/apns-bridge-pg-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let user = isRoot ? "postgres" : ProcessInfo.processInfo.userName
        let cluster = PostgresCluster(
            directory: directory,
            binaries: binaries,
            user: user,
            port: Int.random(in: 20_000..<60_000)
        )
        if isRoot {
            try await cluster.run("/bin/chown", ["postgres", directory], asServer: false)
        }
        try await cluster.run(
            "\(binaries)/initdb",
            ["-D", "\(directory)/data", "-U", user, "--auth=trust", "--no-sync"]
        )
        _ = FileManager.default.createFile(atPath: "\(directory)/server.log", contents: nil)
        try await cluster.startServer()
        return cluster
    }

    /// Starts the server (again) on its data, and waits until it accepts connections. The
    /// postmaster runs as a child of the test process (not through `pg_ctl start`, whose
    /// daemon keeps Foundation from seeing `pg_ctl` exit). After a kill, the old server's
    /// backends may still hold its shared memory for a moment: the start is tried again until
    /// they are gone.
    package func startServer() async throws {
        for attempt in 1... {
            let process = Process()
            process.executableURL = URL(
                fileURLWithPath: getuid() == 0 ? "/usr/sbin/runuser" : "\(self.binaries)/postgres"
            )
            let arguments = [
                "-D", "\(self.directory)/data", "-c", "listen_addresses=", "-k", self.directory, "-p", "\(self.port)",
                "-c", "fsync=off",
            ]
            process.arguments =
                getuid() == 0 ? ["-u", "postgres", "--", "\(self.binaries)/postgres"] + arguments : arguments
            process.standardInput = FileHandle(forReadingAtPath: "/dev/null")
            let log = try FileHandle(forWritingTo: URL(fileURLWithPath: "\(self.directory)/server.log"))
            try log.seekToEnd()
            process.standardOutput = log
            process.standardError = log
            try process.run()
            self.servers.withLock { $0.append(process) }
            for _ in 0..<600 {
                if (try? await self.run("\(self.binaries)/pg_isready", ["-h", self.directory, "-p", "\(self.port)"]))
                    != nil
                {
                    return
                }
                if !process.isRunning { break }
                try await Task.sleep(for: .milliseconds(100))
            }
            if attempt >= 20 { throw Failed(what: "start PostgreSQL", detail: self.serverLog) }
            try await Task.sleep(for: .milliseconds(250))
        }
    }

    private var serverLog: String {
        String(((try? String(contentsOfFile: "\(self.directory)/server.log", encoding: .utf8)) ?? "").suffix(2000))
    }

    /// `pg_ctl stop -m fast`: every session is ended (their statements fail with 57P01), and the
    /// server shuts down cleanly.
    package func stopFast() async throws {
        try await self.run("\(self.binaries)/pg_ctl", ["-D", "\(self.directory)/data", "-m", "fast", "-W", "stop"])
        try await self.waitUntilStopped()
    }

    /// SIGKILL to the postmaster, as a crash or an OOM kill: its backends end on their own.
    package func kill() throws {
        guard let pid = self.postmaster else { throw Failed(what: "find the postmaster", detail: self.serverLog) }
        _ = Glibc.kill(pid, SIGKILL)
    }

    /// The running postmaster's process id (from its pid file).
    private var postmaster: pid_t? {
        guard let pidFile = try? String(contentsOfFile: "\(self.directory)/data/postmaster.pid", encoding: .utf8),
            let pid = pidFile.split(separator: "\n").first.flatMap({ pid_t($0) }),
            Glibc.kill(pid, 0) == 0
        else { return nil }
        return pid
    }

    /// Stops the server (if it runs) and deletes its folder.
    package func remove() async {
        if let pid = self.postmaster {
            _ = Glibc.kill(pid, SIGKILL)
        }
        for server in self.servers.withLock({ $0 }) {
            try? await eventually("the postmaster to exit", timeout: .seconds(30)) { !server.isRunning }
        }
        try? FileManager.default.removeItem(atPath: self.directory)
    }

    /// Waits (60 s at most) until the postmaster has removed its pid file.
    private func waitUntilStopped() async throws {
        try await eventually("PostgreSQL to stop", timeout: .seconds(60)) {
            !FileManager.default.fileExists(atPath: "\(self.directory)/data/postmaster.pid")
        }
    }

    /// Runs a server program as the cluster's user.
    private func run(_ program: String, _ arguments: [String], asServer: Bool = true) async throws {
        let asPostgres = asServer && getuid() == 0
        let run = try await ChildRun.run(
            asPostgres ? "/usr/sbin/runuser" : program,
            asPostgres ? ["-u", "postgres", "--", program] + arguments : arguments,
            timeout: .seconds(120)
        )
        guard run.status == 0 else {
            throw Failed(
                what: "\(program) \(arguments.joined(separator: " "))",
                detail: run.output + run.error + "\nserver.log ends:\n" + self.serverLog
            )
        }
    }

    package struct Failed: Error, CustomStringConvertible {
        package var what: String
        package var detail: String
        package var description: String { "could not \(self.what): \(self.detail)" }
    }
}

extension PostgresCluster: ScopedResource {
    package func cleanUp() async {
        await self.remove()
    }
}
