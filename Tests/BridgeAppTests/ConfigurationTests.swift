import BridgeApp
import BridgeCore
import BridgeForwarding
import BridgeServer
import BridgeStores
import BridgeTestSupport
import Crypto
import DevelopmentPKI
import Foundation
import Logging
import NIOCore
import Testing
import UpstreamAPNs

/// The configuration: a YAML file, APNS_BRIDGE_* environment variables and flags, in that
/// order of precedence; errors name their key; the documented examples load.
@Suite("Configuration")
struct ConfigurationTests {
    typealias Files = ConfigurationFiles

    @Test("Flags win over environment variables, which win over the file")
    func precedence() async throws {
        let files = try Files()
        defer { files.remove() }
        let file = try files.write(
            """
            gateway:
              listen: 127.0.0.1:1111
              maximumConnections: 11
            feedback:
              listen: 127.0.0.1:2222
            """
        )
        let environment = [
            "APNS_BRIDGE_GATEWAY_LISTEN": "127.0.0.1:3333",
            SettingsReader.environmentVariable(for: "feedback.only32ByteTokens"): "true", "HOME": "/root",
        ]
        var flags = files.basics
        flags["gateway.listen"] = "127.0.0.1:4444"

        let all = try BridgeSettings.load(
            from: try await SettingsReader(flags: flags, environment: environment, file: file)
        )
        #expect(all.gateway.port == 4444)  // flag
        #expect(all.gateway.maximumConnections == 11)  // file
        #expect(all.feedback.port == 2222)  // file
        #expect(all.feedback.drain.only32ByteTokens)  // environment

        let noFlag = try BridgeSettings.load(
            from: try await SettingsReader(flags: files.basics, environment: environment, file: file)
        )
        #expect(noFlag.gateway.port == 3333)  // environment over file
        let fileOnly = try BridgeSettings.load(
            from: try await SettingsReader(flags: files.basics, environment: [:], file: file)
        )
        #expect(fileOnly.gateway.port == 1111)
        #expect(!fileOnly.feedback.drain.only32ByteTokens)
        let defaults = try BridgeSettings.load(
            from: try await SettingsReader(flags: files.basics, environment: [:], file: nil)
        )
        #expect(defaults.gateway.port == 2195)
        #expect(defaults.feedback.port == 2196)
        #expect(defaults.admin?.host == "127.0.0.1")
        #expect(defaults.storeLocation == "sqlite:apns-bridge.sqlite")
    }

    @Test("Every documented key's environment variable sets that key")
    func environmentNames() async throws {
        #expect(SettingsReader.environmentVariable(for: "tenant.shop.uid") == "APNS_BRIDGE_TENANT_SHOP_UID")
        #expect(
            SettingsReader.environmentVariable(for: "credential.team-a.pkcs12Password")
                == "APNS_BRIDGE_CREDENTIAL_TEAM_A_PKCS12PASSWORD"
        )
        let files = try Files()
        defer { files.remove() }
        // Values that differ from the defaults, set through the names environmentVariable(for:) gives.
        let keys: [String: String] = [
            "gateway.maximumInFlight": "7", "tls.allowTLS13": "true", "tls.allowLegacyTLS": "true",
            "tls.closeNotifyWaitSeconds": "0.5", "upstream.connectionsPerPool": "5", "upstream.retryBudgetSeconds": "3",
            "store.resendWindowSeconds": "9",
            "feedback.retentionDays": "2", "admin.listen": "off", "environment": "sandbox", "log.level": "debug",
            "tenants": "shop", "tenant.shop.uid": "com.example.shop", "tenant.shop.environment": "production",
        ]
        let environment = Dictionary(
            uniqueKeysWithValues: keys.map { (SettingsReader.environmentVariable(for: $0.key), $0.value) }
        )
        let settings = try BridgeSettings.load(
            from: try await SettingsReader(flags: files.basics, environment: environment, file: nil)
        )
        #expect(settings.gateway.session.maximumInFlight == 7)
        #expect(settings.gateway.tls.allowTLS13)
        #expect(settings.gateway.tls.allowLegacyTLS)
        #expect(settings.gateway.tls.closeNotifyWait == .milliseconds(500))
        #expect(settings.upstream.client.connectionsPerPool == 5)
        #expect(settings.upstream.client.retryBudget == .seconds(3))
        #expect(settings.store.resendRecordWindow == .seconds(9))
        #expect(settings.store.feedbackRetention == .seconds(2 * 86_400))
        #expect(settings.admin == nil)
        #expect(settings.tenants.defaultEnvironment == .sandbox)
        #expect(settings.logLevel == .debug)
        #expect(
            settings.tenants.rules == [TenantRule(name: "shop", userID: "com.example.shop", environment: .production)]
        )
        #expect(!settings.tenants.acceptsUnlistedCertificates)
    }

    @Test(
        "An unusable value is an error naming its key",
        arguments: [
            ("gateway.listen", "nowhere", "gateway.listen"),
            ("gateway.maximumConnections", "lots", "gateway.maximumConnections"),
            ("tls.allowTLS13", "maybe", "tls.allowTLS13"),
            ("environment", "staging", "environment"),
            ("tls.certificate", "/nonexistent/cert.pem", "tls.certificate"),
            ("store.url", "mysql://db", "store.url"),
            ("defaultCredentials", "nobody", "defaultCredentials"),
            ("tls.pinnedFingerprints", "abc", "tls.pinnedFingerprints"),
            ("log.level", "loud", "log.level"),
            // Numbers are plain decimal: Swift's parsers take these (0x3c as 60 s).
            ("tls.closeNotifyWaitSeconds", "0x3c", "tls.closeNotifyWaitSeconds"),
            ("tls.closeNotifyWaitSeconds", "+5", "tls.closeNotifyWaitSeconds"),
            ("tls.closeNotifyWaitSeconds", "1e1", "tls.closeNotifyWaitSeconds"),
            ("gateway.maximumConnections", "+100", "gateway.maximumConnections"),
            ("gateway.listen", "127.0.0.1:+2195", "gateway.listen"),
            // A port beyond 65535 would be dialled modulo 65,536 (99999 as 34463).
            ("store.url", "postgres://bridge@db.example:99999/bridge", "store.url"),
            ("store.url", "postgres://bridge@db.example:0/bridge", "store.url"),
            // Every address as a load balancer: refused unless written `any`.
            ("proxyProtocol.loadBalancers", "0.0.0.0/0", "proxyProtocol.loadBalancers"),
            ("proxyProtocol.loadBalancers", "10.0.0.1,::/0", "proxyProtocol.loadBalancers"),
        ]
    )
    func errorsNameTheirKey(key: String, value: String, expectedKey: String) async throws {
        let files = try Files()
        defer { files.remove() }
        var flags = files.basics
        flags[key] = value
        let reader = try await SettingsReader(flags: flags, environment: [:], file: nil)
        let error = try #require(throws: ConfigurationError.self) { try BridgeSettings.load(from: reader) }
        #expect(error.key == expectedKey)
        #expect(error.description.contains(SettingsReader.environmentVariable(for: expectedKey)))
    }

    @Test(
        "Tenants are cross-checked: unknown credentials, a tenant matching nothing, a shared UID, a topic that is not a bundle id"
    )
    func tenantErrors() async throws {
        let files = try Files()
        defer { files.remove() }
        let cases: [([String: String], String)] = [
            (["tenants": "a", "tenant.a.uid": "com.a", "tenant.a.credentials": "other"], "tenant.a.credentials"),
            (["tenants": "a"], "tenant.a.uid"),
            (["tenants": "a,b", "tenant.a.uid": "com.a", "tenant.b.uid": "com.a"], "tenant.b.uid"),
            (["tenants": "a b"], "tenants"),
            (["credentials": "main,extra"], "credential.extra.keyFile"),
            (
                ["tenants": "a", "tenant.a.uid": "com.a", "tenant.a.topic": "com.a\r\napns-priority: 5"],
                "tenant.a.topic"
            ),
            (["tenants": "a", "tenant.a.uid": "com.a", "tenant.a.topic": "com a"], "tenant.a.topic"),
        ]
        for (extra, expectedKey) in cases {
            let reader = try await SettingsReader(
                flags: files.basics.merging(extra) { $1 },
                environment: [:],
                file: nil
            )
            let error = try #require(throws: ConfigurationError.self) { try BridgeSettings.load(from: reader) }
            #expect(error.key == expectedKey, "\(extra)")
        }
    }

    @Test("The documented examples load, with their paths pointed at real files")
    func documentedExamples() async throws {
        let files = try Files()
        defer { files.remove() }
        let examples = Repository.root.appendingPathComponent("docs/examples")
        let replacements = [
            "/etc/apns-bridge/gateway.pem": files.directory + "/gateway.crt",
            "/etc/apns-bridge/gateway.key": files.directory + "/gateway.key",
            "/etc/apns-bridge/provider-ca.pem": files.directory + "/provider-ca.pem",
            "/etc/apns-bridge/AuthKey_ABCDE12345.p8": files.directory + "/AuthKey.p8",
            "/etc/apns-bridge/legacy-app-push.pem": files.directory + "/gateway.crt",
            "/etc/apns-bridge/legacy-app-push.key": files.directory + "/gateway.key",
            "/var/lib/apns-bridge/": files.directory + "/",
        ]
        for name in ["apns-bridge.yaml", "minimal.yaml"] {
            var text = try String(contentsOf: examples.appendingPathComponent(name), encoding: .utf8)
            for (from, to) in replacements {
                text = text.replacingOccurrences(of: from, with: to)
            }
            let path = try files.write(text, name: name)
            let settings = try BridgeSettings.load(
                from: try await SettingsReader(flags: [:], environment: [:], file: path)
            )
            if name == "apns-bridge.yaml" {
                #expect(settings.tenants.rules.map(\.name) == ["shop", "news"])
                #expect(settings.tenants.rules[1].environment == .sandbox)
                #expect(settings.tenants.rules[1].credentials == "legacy-app")
                #expect(settings.credentials.count == 2)
                #expect(settings.defaultCredentials == "team-a")
                #expect(!settings.tenants.acceptsUnlistedCertificates)
            } else {
                #expect(settings.tenants.rules.isEmpty)
                #expect(settings.tenants.acceptsUnlistedCertificates)
                #expect(settings.gateway.port == 2195)
            }
        }
    }
}

/// `check-config` (BridgeSettings.load) catches what `serve` would fail on.
@Suite("Configuration: what serve would fail on")
struct ConfigurationFailsEarlyTests {
    typealias Files = ConfigurationTests.Files

    static func loadError(_ flags: [String: String]) async throws -> ConfigurationError {
        let reader = try await SettingsReader(flags: flags, environment: [:], file: nil)
        return try #require(throws: ConfigurationError.self) { try BridgeSettings.load(from: reader) }
    }

    @Test("A private key that is not the certificate's is refused, naming tls.privateKey")
    func mismatchedKey() async throws {
        let files = try Files()
        defer { files.remove() }
        // Another identity's key beside the gateway's certificate.
        let other = try DevelopmentCA()
        _ = try other.server.writePEMFiles(to: files.directory, name: "other")
        var flags = files.basics
        flags["tls.privateKey"] = files.directory + "/other.key"
        let error = try await Self.loadError(flags)
        #expect(error.key == "tls.privateKey")
        #expect(error.description.contains("other.key"))
        #expect(error.description.contains("APNS_BRIDGE_TLS_PRIVATE_KEY"))
    }

    @Test("An upstream certificate with another certificate's key is refused")
    func mismatchedUpstreamKey() async throws {
        let files = try Files()
        defer { files.remove() }
        let other = try DevelopmentCA()
        _ = try other.server.writePEMFiles(to: files.directory, name: "other")
        var flags = files.basics
        flags["credentials"] = "main,cert"
        flags["credential.cert.certificate"] = files.directory + "/gateway.crt"
        flags["credential.cert.privateKey"] = files.directory + "/other.key"
        let error = try await Self.loadError(flags)
        #expect(error.key == "credential.cert.privateKey")
    }

    @Test(
        "Key and team ids that are not 10 letters and digits are refused",
        arguments: [
            ("credential.main.keyId", "KEY123"), ("credential.main.keyId", "KEY1234567X"),
            ("credential.main.teamId", "TEAM-12345"),
        ]
    )
    func identifiers(key: String, value: String) async throws {
        let files = try Files()
        defer { files.remove() }
        var flags = files.basics
        flags[key] = value
        let error = try await Self.loadError(flags)
        #expect(error.key == key)
    }

    @Test("An unusable store is refused before anything is created: a missing folder, a file that is not a database")
    func unusableStore() async throws {
        let files = try Files()
        defer { files.remove() }
        var flags = files.basics
        flags["store.url"] = "sqlite:/nonexistent/dir/x.sqlite"
        #expect(try await Self.loadError(flags).key == "store.url")
        #expect(!FileManager.default.fileExists(atPath: "/nonexistent/dir"))

        let notADatabase = files.directory + "/notes.txt"
        try "not a database\n".write(toFile: notADatabase, atomically: true, encoding: .utf8)
        flags["store.url"] = "sqlite:" + notADatabase
        let error = try await Self.loadError(flags)
        #expect(error.key == "store.url")
        #expect(error.description.contains("not an SQLite database"))

        flags["store.url"] = "postgres://"
        #expect(try await Self.loadError(flags).key == "store.url")

        // A special file system where nothing can be created, even by root; a device.
        flags["store.url"] = "sqlite:/proc/apns-bridge.sqlite"
        #expect(try await Self.loadError(flags).description.contains("cannot create files"))
        flags["store.url"] = "sqlite:/dev/null"
        #expect(try await Self.loadError(flags).description.contains("not a regular file"))

        // An empty file (as `touch` leaves it) and a new path are fine.
        let empty = files.directory + "/empty.sqlite"
        _ = FileManager.default.createFile(atPath: empty, contents: nil)
        flags["store.url"] = "sqlite:" + empty
        _ = try BridgeSettings.load(from: try await SettingsReader(flags: flags, environment: [:], file: nil))
        flags["store.url"] = "sqlite:" + files.directory + "/new.sqlite"
        _ = try BridgeSettings.load(from: try await SettingsReader(flags: flags, environment: [:], file: nil))
        #expect(!FileManager.default.fileExists(atPath: files.directory + "/new.sqlite"), "checking creates nothing")
    }

    @Test("An unreadable --config names APNS_BRIDGE_CONFIG")
    func configFileVariable() async throws {
        let error = try await #require(throws: ConfigurationError.self) {
            _ = try await SettingsReader(flags: [:], environment: [:], file: "/nonexistent/apns-bridge.yaml")
        }
        #expect(error.key == "--config")
        #expect(error.description.contains("(environment APNS_BRIDGE_CONFIG)"))
    }
}

/// A key the bridge does not know is refused, naming the nearest known key.
@Suite("Configuration: unknown keys")
struct UnknownKeyTests {
    typealias Files = ConfigurationTests.Files

    @Test(
        "A misspelt key in the file is refused, naming the key and the nearest known one",
        arguments: [
            ("tls:\n  certficate: /x.pem\n", "tls.certficate", "tls.certificate"),
            ("gateway:\n  maximumInFlght: 10\n", "gateway.maximumInFlght", "gateway.maximumInFlight"),
            ("upstream:\n  retryBudget: 5\n", "upstream.retryBudget", "upstream.retryBudgetSeconds"),
        ]
    )
    func misspeltInFile(yaml: String, key: String, nearest: String) async throws {
        let files = try Files()
        defer { files.remove() }
        let file = try files.write(yaml)
        let reader = try await SettingsReader(flags: files.basics, environment: [:], file: file)
        let error = try #require(throws: ConfigurationError.self) { try BridgeSettings.load(from: reader) }
        #expect(error.key == key)
        #expect(error.description.contains("did you mean \(nearest)?"))
    }

    @Test(
        "A value of the wrong shape in the file is refused naming its key: a list for a single value, a mapping for a list"
    )
    func wrongShapes() async throws {
        let files = try Files()
        defer { files.remove() }
        let cases: [(String, String)] = [
            ("tenants: [a]\ntenant:\n  a:\n    uid: com.a\n    topic: [com.a, com.b]\n", "tenant.a.topic"),
            ("tenants: [a]\ntenant:\n  a:\n    uid: [com.a, com.b]\n", "tenant.a.uid"),
            ("log:\n  level: [info, debug]\n", "log.level"),
            ("tenants:\n  a: 1\n", "tenants"),
        ]
        for (yaml, key) in cases {
            let path = files.directory + "/shape.yaml"
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            let reader = try await SettingsReader(flags: files.basics, environment: [:], file: path)
            let error = try #require(throws: ConfigurationError.self) { try BridgeSettings.load(from: reader) }
            #expect(error.key == key, "\(yaml)")
            #expect(error.message.contains("where"), "\(error)")
        }
        // A single value where a list belongs is a list of one.
        try "tenants: a\ntenant:\n  a:\n    uid: com.a\n".write(
            toFile: files.directory + "/one.yaml",
            atomically: true,
            encoding: .utf8
        )
        _ = try BridgeSettings.load(
            from: try await SettingsReader(flags: files.basics, environment: [:], file: files.directory + "/one.yaml")
        )
    }

    @Test(
        "upstream.http2Engine: auto takes the best engine of the build; nghttp2 in a build without it is refused naming the build flag"
    )
    func http2Engine() async throws {
        let files = try Files()
        defer { files.remove() }
        func load(_ engine: String?) async throws -> BridgeSettings {
            var flags = files.basics
            flags["upstream.http2Engine"] = engine
            return try BridgeSettings.load(from: try await SettingsReader(flags: flags, environment: [:], file: nil))
        }
        #expect(try await load(nil).upstream.client.engine == APNsHTTP2Engine.preferred)
        #expect(try await load("auto").upstream.client.engine == APNsHTTP2Engine.preferred)
        #expect(try await load("nio").upstream.client.engine == .nio)
        if APNsHTTP2Engine.nghttp2.isAvailable {
            #expect(APNsHTTP2Engine.preferred == .nghttp2)
            #expect(try await load("nghttp2").upstream.client.engine == .nghttp2)
        } else {
            #expect(APNsHTTP2Engine.preferred == .nio)
            var flags = files.basics
            flags["upstream.http2Engine"] = "nghttp2"
            let error = try await ConfigurationFailsEarlyTests.loadError(flags)
            #expect(error.key == "upstream.http2Engine")
            #expect(error.message.contains("--traits NGHTTP2Engine"))
        }
        var flags = files.basics
        flags["upstream.http2Engine"] = "quic"
        #expect(try await ConfigurationFailsEarlyTests.loadError(flags).key == "upstream.http2Engine")
    }

    @Test("A misspelt --set key, and a tenant not listed in tenants, are refused")
    func flagsAndNames() async throws {
        let files = try Files()
        defer { files.remove() }
        var flags = files.basics
        flags["gateway.maximumConections"] = "5"
        let flagReader = try await SettingsReader(flags: flags, environment: [:], file: nil)
        var error = try #require(throws: ConfigurationError.self) { try BridgeSettings.load(from: flagReader) }
        #expect(error.key == "gateway.maximumConections")
        #expect(error.description.contains("gateway.maximumConnections"))

        let file = try files.write(
            "tenants: [shop]\ntenant:\n  shop:\n    uid: com.example.shop\n  news:\n    uid: com.example.news\n"
        )
        let fileReader = try await SettingsReader(flags: files.basics, environment: [:], file: file)
        error = try #require(throws: ConfigurationError.self) { try BridgeSettings.load(from: fileReader) }
        #expect(error.key == "tenant.news.uid")
        #expect(error.description.contains("tenants"))
    }

    @Test(
        "Every key the settings read is in the schema, and docs/configuration.md lists exactly the schema's keys, variables and reload"
    )
    func knownKeysMatchTheCodeAndTheDocs() async throws {
        let files = try Files()
        defer { files.remove() }
        // A configuration with two tenants and two credentials, read completely.
        var flags = files.basics
        flags["credentials"] = "main,cert"
        flags["credential.cert.certificate"] = files.directory + "/gateway.crt"
        flags["credential.cert.privateKey"] = files.directory + "/gateway.key"
        flags["tenants"] = "a,b"
        flags["tenant.a.uid"] = "com.a"
        flags["tenant.b.uid"] = "com.b"
        flags["tenant.b.credentials"] = "cert"
        let reader = try await SettingsReader(flags: flags, environment: [:], file: nil)
        _ = try BridgeSettings.load(from: reader)
        let known = BridgeSettings.knownKeys(tenants: ["a", "b"], credentials: ["main", "cert"])
        #expect(
            reader.requestedKeys.subtracting(known).isEmpty,
            "read but not known: \(reader.requestedKeys.subtracting(known).sorted())"
        )

        let docs = Repository.root.appendingPathComponent("docs/configuration.md")
        let text = try String(contentsOf: docs, encoding: .utf8)
        // The table "Every key": | `key` | default | `ENVIRONMENT_VARIABLE` | live or restart | meaning |
        var documented: [String: (environment: String, reload: String)] = [:]
        for line in text.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            guard cells.count >= 6, cells[3].hasPrefix("`APNS_BRIDGE_") else { continue }
            let key = cells[1].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            #expect(
                documented.updateValue(
                    (cells[3].trimmingCharacters(in: CharacterSet(charactersIn: "`")), cells[4]),
                    forKey: key
                ) == nil,
                "\(key) is listed twice"
            )
        }
        let schema = ConfigurationKey.allKeys
        #expect(
            Set(documented.keys) == Set(schema.map(\.name)),
            "docs only: \(Set(documented.keys).subtracting(schema.map(\.name)).sorted()); schema only: \(Set(schema.map(\.name)).subtracting(documented.keys).sorted())"
        )
        for key in schema {
            guard let row = documented[key.name] else { continue }
            #expect(row.environment == key.environmentVariable, "\(key.name): the docs say \(row.environment)")
            #expect(
                row.reload == key.applies.rawValue,
                "\(key.name): the docs say \(row.reload), the schema \(key.applies.rawValue)"
            )
        }
        // Whether a reload applies a key comes from the same table.
        #expect(BridgeSettings.isLive("tenant.shop.channel.live.id"))
        #expect(BridgeSettings.isLive("credential.main.keyFile"))
        #expect(!BridgeSettings.isLive("gateway.maximumInFlight"))
        #expect(!BridgeSettings.isLive("not.a.key"))
    }
}
