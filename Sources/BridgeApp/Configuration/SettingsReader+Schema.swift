import NIOCore

/// Reads through the schema: the range a value is checked against is its key's entry's, and the
/// default is the caller's (from a configuration struct's initializer where there is one).
extension SettingsReader {
    func string(_ key: ConfigurationKey, secret: Bool = false) -> String? {
        self.string(key.name, secret: secret)
    }

    func list(_ key: ConfigurationKey) -> [String] {
        self.list(key.name)
    }

    func names(_ key: ConfigurationKey) throws -> [String] {
        try self.names(key.name)
    }

    func file(_ key: ConfigurationKey) throws -> String? {
        try self.file(key.name)
    }

    func requiredFile(_ key: ConfigurationKey, why: String) throws -> String {
        try self.requiredFile(key.name, why: why)
    }

    func bool(_ key: ConfigurationKey, default value: Bool) throws -> Bool {
        try self.bool(key.name, default: value)
    }

    func int(_ key: ConfigurationKey, default value: Int) throws -> Int {
        guard case .whole(let range) = key.values else { preconditionFailure("\(key) is not a whole number") }
        return try self.int(key.name, default: value, range: range)
    }

    /// A number of seconds (or days) as a duration.
    func duration(_ key: ConfigurationKey, default value: Duration) throws -> Duration {
        guard self.string(key) != nil else { return value }
        switch key.values {
        case .seconds(let range):
            return try self.seconds(key.name, default: 0, range: range)
        case .days(let range):
            return try self.seconds(key.name, default: 0, range: range, unit: "days", secondsPerUnit: 86_400)
        default:
            preconditionFailure("\(key) is not a duration")
        }
    }

    func timeAmount(_ key: ConfigurationKey, default value: TimeAmount) throws -> TimeAmount {
        TimeAmount(try self.duration(key, default: Duration.nanoseconds(value.nanoseconds)))
    }

    /// A number of seconds, or `nil` when the key is not set (a tenant's override of a
    /// listener's value).
    func optionalTimeAmount(_ key: ConfigurationKey) throws -> TimeAmount? {
        guard self.string(key) != nil else { return nil }
        return try self.timeAmount(key, default: .zero)
    }

    /// One of the entry's choices, mapped to its value; the mapping must name exactly the
    /// choices the schema lists.
    func choice<T>(_ key: ConfigurationKey, default value: T, _ choices: [String: T]) throws -> T {
        guard case .choice(let names) = key.values, Set(names) == Set(choices.keys) else {
            preconditionFailure("\(key): the choices read are not the schema's")
        }
        return try self.choice(key.name, default: value, choices)
    }

    func address(_ key: ConfigurationKey, default value: String) throws -> (host: String, port: Int)? {
        guard case .address(let allowsOff) = key.values else { preconditionFailure("\(key) is not an address") }
        return try self.address(key.name, default: value, allowOff: allowsOff)
    }
}
