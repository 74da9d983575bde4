import Foundation

/// One configuration key: its name, the values it takes, whether a reload applies it, and one
/// line about it.
///
/// ``ConfigurationKey/schema`` lists every key once. Loading reads each key through its entry
/// (so the range checked is the range documented), the unknown-key check and the reload's
/// live-or-restart split are derived from the list, `apns-bridge check-config --keys` prints it,
/// and a test checks that docs/configuration.md lists exactly these keys. Defaults are not
/// here when a configuration struct has them (`GatewayConfiguration`, `APNsClient.Configuration`,
/// `BridgeStoreConfiguration`): loading starts from those structs' initializers.
package struct ConfigurationKey: Sendable, Hashable, CustomStringConvertible {
    /// What a key's value may be; the ranges are the ones loading enforces.
    package enum Values: Sendable, Hashable {
        case text
        /// A path to a readable file.
        case file
        /// A list of paths (a YAML list or comma-separated).
        case files
        /// A list of texts (a YAML list or comma-separated).
        case list
        /// A list of names of letters, digits, `-` and `_` (tenants, credentials, channels).
        case names
        case flag
        case whole(ClosedRange<Int>)
        case seconds(ClosedRange<Double>)
        case days(ClosedRange<Double>)
        case choice([String])
        /// `HOST:PORT`, or also `off`.
        case address(allowsOff: Bool)
    }

    /// Whether a reload (SIGHUP, `apns-bridge reload`, a watched file) applies a change of the
    /// key to the running bridge, or reports that it needs a restart.
    package enum Applies: String, Sendable, Hashable {
        case live
        case restart
    }

    /// The dotted key; `NAME` and `CHANNEL` stand for a tenant's or a credential's name and a
    /// channel's name in the keys of ``tenantKeys``, ``channelKeys`` and ``credentialKeys``.
    package let name: String
    package let values: Values
    package let applies: Applies
    /// One line for `check-config --keys`; docs/configuration.md says more.
    package let summary: String

    init(_ name: String, _ values: Values, _ applies: Applies, _ summary: String) {
        self.name = name
        self.values = values
        self.applies = applies
        self.summary = summary
    }

    /// The environment variable that sets the key.
    package var environmentVariable: String {
        SettingsReader.environmentVariable(for: self.name)
    }

    /// The key of one tenant or credential (and channel): `tenant.NAME.uid` named `shop` is
    /// `tenant.shop.uid`.
    package func named(_ name: String, channel: String? = nil) -> ConfigurationKey {
        var parts = self.name.split(separator: ".").map(String.init)
        if let index = parts.firstIndex(of: "NAME") { parts[index] = name }
        if let channel, let index = parts.firstIndex(of: "CHANNEL") { parts[index] = channel }
        return ConfigurationKey(parts.joined(separator: "."), self.values, self.applies, self.summary)
    }

    /// The last part of the key: `uid` of `tenant.NAME.uid`.
    var leaf: String {
        String(self.name.split(separator: ".").last ?? "")
    }

    /// The values in words, as error messages and `check-config --keys` give them.
    package var range: String {
        switch self.values {
        case .text: "text"
        case .file: "a readable file"
        case .files: "readable files (a list, or comma-separated)"
        case .list: "a list, or comma-separated"
        case .names: "names of letters, digits, - and _"
        case .flag: "true or false"
        case .whole(let range): "\(range.lowerBound) to \(range.upperBound)"
        case .seconds(let range): "\(range.lowerBound.formatted()) to \(range.upperBound.formatted()) seconds"
        case .days(let range): "\(range.lowerBound.formatted()) to \(range.upperBound.formatted()) days"
        case .choice(let choices): choices.joined(separator: ", ")
        case .address(let allowsOff): allowsOff ? "HOST:PORT or off" : "HOST:PORT"
        }
    }

    package var description: String {
        self.name
    }
}
