import ArgumentParser
import BridgeApp
import BridgeCore
import BridgeServer
import Foundation
import Logging
import NIOCore
import UpstreamAPNs

struct ChannelsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "channels",
        abstract: "Manages a tenant's Live Activity channels (broadcast push) over Apple's channel management API.",
        discussion: """
            A legacy provider reaches a channel through its channel token, a 32-byte value stored \
            in its device table like any device token; docs/broadcast.md explains the model. \
            `create`, `list`, `get` and `delete` talk to APNs with the tenant's credentials, in \
            the tenant's environment; `token` prints the channel token the bridge derives for a \
            channel id. Each takes the options of `serve` (--config, --set, …) and prints JSON \
            with --json.
            """,
        subcommands: [Create.self, List.self, Get.self, Delete.self, Token.self]
    )

    /// What every subcommand takes.
    struct Common: ParsableArguments {
        @Option(help: "The configured tenant (tenants / tenant.NAME) whose channels these are.")
        var tenant: String

        @Flag(help: "Print JSON (one object) instead of text.")
        var json = false
    }

    // MARK: create

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Creates a channel; prints its id and channel token.",
            discussion: """
                With --add-to-config, the channel is added to the --config file under the tenant \
                (tenant.NAME.channels and tenant.NAME.channel.CHANNEL), with its derived channel \
                token; the file as it was is kept as FILE.bak (YAML comments do not survive the \
                rewrite). A running bridge picks it up on `apns-bridge reload` (SIGHUP).
                """
        )

        @OptionGroup var common: Common
        @OptionGroup var options: BridgeOptions

        @Option(
            name: .customLong("storage-policy"),
            help: "most-recent (APNs keeps the last broadcast for devices that were offline) or none."
        )
        var storagePolicy: String = "most-recent"

        @Option(
            help:
                "The channel's name in the configuration (letters, digits, - and _); default: ch- and the first 8 hex digits of its token."
        )
        var name: String?

        @Flag(name: .customLong("add-to-config"), help: "Add the new channel to the --config file.")
        var addToConfig = false

        func validate() throws {
            guard ["most-recent", "none"].contains(self.storagePolicy) else {
                throw ValidationError("--storage-policy \(self.storagePolicy): expected most-recent or none")
            }
            if let name,
                name.isEmpty
                    || !name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
            {
                throw ValidationError("--name \(name): letters, digits, - and _ only")
            }
            if self.addToConfig, self.options.config == nil,
                ProcessInfo.processInfo.environment["APNS_BRIDGE_CONFIG"] == nil
            {
                throw ValidationError("--add-to-config needs the --config file to add the channel to")
            }
        }

        func run() async throws {
            let target = try await ChannelTarget.resolve(self.common, self.options)
            defer { target.client.shutdown() }
            let policy: APNsMessageStoragePolicy =
                self.storagePolicy == "none" ? .noMessageStored : .mostRecentMessageStored
            let id = try await target.run {
                try await $0.create(bundleID: target.bundleID, messageStoragePolicy: policy)
            }
            let token = ChannelToken.hex(ChannelToken.derive(tenant: target.tenant, channelID: id))
            let name = self.name ?? "ch-" + token.prefix(8)
            var result: [String: Any] = [
                "tenant": target.tenant, "environment": target.environment.rawValue, "channelId": id,
                "channelToken": token,
                "name": name, "messageStoragePolicy": policy.rawValue,
            ]
            if self.addToConfig,
                let file = self.options.config ?? ProcessInfo.processInfo.environment["APNS_BRIDGE_CONFIG"]
            {
                do {
                    let backup = try ChannelConfigFile.add(
                        channel: name,
                        id: id,
                        token: token,
                        messageStoragePolicy: policy.rawValue,
                        tenant: target.tenant,
                        toFile: file
                    )
                    result["config"] = file
                    result["configBackup"] = backup
                } catch {
                    // The channel exists at APNs now: say so, with what to add by hand.
                    ChannelTarget.fail(
                        "created channel \(id) (token \(token)), but could not add it to \(file): \(error); add tenant.\(target.tenant).channel.\(name).id by hand"
                    )
                }
            }
            ChannelTarget.print(result, json: self.common.json) {
                var lines = [
                    "created channel \(id) for \(target.tenant) (\(target.environment.rawValue), \(policy))",
                    "channel token \(token)",
                ]
                if let file = result["config"] as? String {
                    lines.append(
                        "added to \(file) as tenant.\(target.tenant).channel.\(name) (previous file kept as \(file).bak)"
                    )
                } else {
                    lines.append(
                        "add to the configuration: tenant.\(target.tenant).channels: [\(name)], tenant.\(target.tenant).channel.\(name).id: \(id)"
                    )
                }
                return lines
            }
        }
    }

    // MARK: list

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Lists the ids of the app's channels, with their channel tokens."
        )

        @OptionGroup var common: Common
        @OptionGroup var options: BridgeOptions

        func run() async throws {
            let target = try await ChannelTarget.resolve(self.common, self.options)
            defer { target.client.shutdown() }
            let ids = try await target.run { try await $0.channelIDs(bundleID: target.bundleID) }
            let channels = ids.map { target.entry(forChannelID: $0) }
            ChannelTarget.print(
                ["tenant": target.tenant, "environment": target.environment.rawValue, "channels": channels],
                json: self.common.json
            ) {
                channels.isEmpty
                    ? ["no channels"]
                    : channels.map {
                        "\($0["channelId"]!)  token \($0["channelToken"]!)\(($0["name"] as? String).map { "  configured as \($0)" } ?? "")"
                    }
            }
        }
    }

    // MARK: get

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Reads one channel's settings.")

        @OptionGroup var common: Common
        @OptionGroup var options: BridgeOptions

        @Argument(help: "The channel id (base64, as APNs issued it).")
        var channelID: String

        func run() async throws {
            let target = try await ChannelTarget.resolve(self.common, self.options)
            defer { target.client.shutdown() }
            let info = try await target.run { try await $0.channel(self.channelID, bundleID: target.bundleID) }
            var result = target.entry(forChannelID: info.id)
            if let policy = info.messageStoragePolicy { result["messageStoragePolicy"] = policy.rawValue }
            if let pushType = info.pushType { result["pushType"] = pushType }
            ChannelTarget.print(result, json: self.common.json) {
                [
                    "channel \(info.id): \(info.messageStoragePolicy.map { "\($0)" } ?? "storage policy not given"), push type \(info.pushType ?? "not given")",
                    "channel token \(result["channelToken"]!)",
                ]
            }
        }
    }

    // MARK: delete

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Deletes a channel.",
            discussion: """
                Frames still sent to its channel token are answered by APNs with \
                ChannelNotRegistered: the bridge puts the token on the tenant's feedback list, so \
                the legacy software stops sending to it. Remove the channel from the \
                configuration when the feedback service has reported it.
                """
        )

        @OptionGroup var common: Common
        @OptionGroup var options: BridgeOptions

        @Argument(help: "The channel id (base64, as APNs issued it).")
        var channelID: String

        func run() async throws {
            let target = try await ChannelTarget.resolve(self.common, self.options)
            defer { target.client.shutdown() }
            try await target.run { try await $0.delete(self.channelID, bundleID: target.bundleID) }
            ChannelTarget.print(["channelId": self.channelID, "deleted": true], json: self.common.json) {
                ["deleted channel \(self.channelID)"]
            }
        }
    }

    // MARK: token

    struct Token: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Prints the channel token the bridge derives for a channel id (no network, no configuration needed).",
            discussion: """
                The token is the SHA-256 of a fixed label, the tenant's name and the channel id: \
                the same every time, and different for each tenant. It is what a channel without \
                a configured `token` is reached by.
                """
        )

        @OptionGroup var common: Common

        @Argument(help: "The channel id (base64, as APNs issued it).")
        var channelID: String

        func run() throws {
            guard ChannelToken.isValidChannelID(self.channelID) else {
                throw ValidationError("\(self.channelID) is not a channel id (base64, as APNs issues it)")
            }
            let token = ChannelToken.hex(ChannelToken.derive(tenant: self.common.tenant, channelID: self.channelID))
            ChannelTarget.print(
                ["tenant": self.common.tenant, "channelId": self.channelID, "channelToken": token],
                json: self.common.json
            ) {
                [token]
            }
        }
    }
}

/// A tenant's app, environment, credentials and channel management client.
private struct ChannelTarget {
    var tenant: String
    var bundleID: String
    var environment: APNsEnvironment
    var configured: BroadcastChannels
    var client: APNsChannelManagementClient

    static func resolve(_ common: ChannelsCommand.Common, _ options: BridgeOptions) async throws -> ChannelTarget {
        let settings = try await options.loadSettings()
        guard let rule = settings.tenants.rules.first(where: { $0.name == common.tenant }) else {
            let names = settings.tenants.rules.map(\.name)
            Self.fail(
                "no tenant \(common.tenant) in the configuration (tenants: \(names.isEmpty ? "none" : names.joined(separator: ", ")))",
                code: 78
            )
        }
        let environment = rule.environment ?? settings.tenants.defaultEnvironment
        let tenant = Tenant(name: rule.name, topic: rule.topic ?? rule.userID, environment: environment)
        guard let bundleID = tenant.broadcastBundleID else {
            Self.fail("tenant \(rule.name) has no topic or uid: give tenant.\(rule.name).topic", code: 78)
        }
        guard let endpoint = settings.channelManagementEndpoints[environment] else {
            Self.fail("no channel management endpoint for \(environment.rawValue)", code: 78)
        }
        var logger = Logger(label: "apns-bridge.channels")
        logger.logLevel = .error
        let credentials = try settings.makeCredentials(logger: logger)
        guard let credential = credentials[rule.credentials ?? settings.defaultCredentials] else {
            Self.fail("tenant \(rule.name) names credentials that are not configured", code: 78)
        }
        let client = try APNsChannelManagementClient(endpoint: endpoint, credentials: credential, logger: logger)
        return ChannelTarget(
            tenant: rule.name,
            bundleID: bundleID,
            environment: environment,
            configured: rule.channels,
            client: client
        )
    }

    /// A channel id with its channel token and, when the tenant configures it, its name: the
    /// configured token if there is one, else the derived one.
    func entry(forChannelID id: String) -> [String: Any] {
        guard let channel = self.configured.all.first(where: { $0.id == id }) else {
            return [
                "channelId": id,
                "channelToken": ChannelToken.hex(ChannelToken.derive(tenant: self.tenant, channelID: id)),
            ]
        }
        return ["channelId": id, "channelToken": ChannelToken.hex(channel.token), "name": channel.name]
    }

    /// Runs one request; APNs' refusal is printed (status, reason, request id) and exits 1.
    func run<T>(_ body: (APNsChannelManagementClient) async throws -> T) async throws -> T {
        do {
            return try await body(self.client)
        } catch let error as APNsChannelManagementError {
            self.client.shutdown()
            Self.fail("\(error)")
        }
    }

    static func fail(_ message: String, code: Int32 = 1) -> Never {
        FileHandle.standardError.write(Data("apns-bridge channels: \(message)\n".utf8))
        exit(code)
    }

    static func print(_ object: [String: Any], json: Bool, text: () -> [String]) {
        if json, let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) {
            Swift.print(String(decoding: data, as: UTF8.self))
        } else {
            Swift.print(text().joined(separator: "\n"))
        }
    }
}
