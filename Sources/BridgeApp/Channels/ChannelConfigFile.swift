import Foundation
import Yams

/// Adds a channel to a YAML configuration file, for `apns-bridge channels create --add-to-config`.
///
/// The file is read as a YAML tree, the channel is added under `tenant.NAME` (its name appended to
/// `channels`, its `id`, `token` and `messageStoragePolicy` under `channel.CHANNEL`), and the
/// tree is written back. YAML comments do not survive a rewrite, so the file as it was is kept
/// beside it as `FILE.bak`.
package enum ChannelConfigFile {
    package struct EditError: Error, CustomStringConvertible {
        package var description: String
    }

    /// - Returns: the path of the backup of the file as it was.
    @discardableResult
    package static func add(
        channel name: String,
        id: String,
        token: String,
        messageStoragePolicy: Int,
        tenant: String,
        toFile path: String
    ) throws -> String {
        let text = try String(contentsOfFile: path, encoding: .utf8)
        var root = try Yams.compose(yaml: text) ?? Node([(Node, Node)]())
        guard root.mapping != nil else {
            throw EditError(description: "\(path): the top level is not a mapping of keys")
        }
        var tenants = root["tenant"] ?? Node([(Node, Node)]())
        var tenantNode = tenants[tenant] ?? Node([(Node, Node)]())
        guard tenants.mapping != nil, tenantNode.mapping != nil else {
            throw EditError(description: "\(path): tenant.\(tenant) is not a mapping of keys")
        }
        switch tenantNode["channels"] {
        case .sequence(var names)?:
            guard !names.contains(Node(name)) else {
                throw EditError(description: "tenant.\(tenant).channels already lists \(name)")
            }
            names.append(Node(name))
            tenantNode["channels"] = .sequence(names)
        case .scalar(let scalar)? where !scalar.string.isEmpty:
            let names = scalar.string.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            guard !names.contains(name) else {
                throw EditError(description: "tenant.\(tenant).channels already lists \(name)")
            }
            tenantNode["channels"] = Node((names + [name]).map { Node($0) })
        default:
            tenantNode["channels"] = Node([Node(name)])
        }
        var channels = tenantNode["channel"] ?? Node([(Node, Node)]())
        channels[name] = Node([
            (Node("id"), Node(id, Tag(.str), .doubleQuoted)),
            (Node("token"), Node(token, Tag(.str), .doubleQuoted)),
            (Node("messageStoragePolicy"), Node(String(messageStoragePolicy), Tag(.int))),
        ])
        tenantNode["channel"] = channels
        tenants[tenant] = tenantNode
        root["tenant"] = tenants
        let updated = try Yams.serialize(node: root)
        let backup = path + ".bak"
        try text.write(toFile: backup, atomically: true, encoding: .utf8)
        try updated.write(toFile: path, atomically: true, encoding: .utf8)
        return backup
    }
}
