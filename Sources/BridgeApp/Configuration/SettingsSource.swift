/// Where the settings come from (flags, `APNS_BRIDGE_*` variables, the file), kept so that a
/// reload reads them again the way start-up did.
public struct SettingsSource: Sendable {
    public var flags: [String: String]
    public var environment: [String: String]
    /// The YAML configuration file, if any.
    public var file: String?

    public init(flags: [String: String], environment: [String: String], file: String?) {
        self.flags = flags
        self.environment = environment
        self.file = file
    }

    /// Reads and checks the settings as they are now.
    public func load() async throws -> BridgeSettings {
        try await self.loadWithSetValues().settings
    }

    /// Reads and checks the settings, and says which keys were set, to what
    /// (``SettingsReader/setValues``).
    public func loadWithSetValues() async throws -> (settings: BridgeSettings, set: [(key: String, value: String)]) {
        let reader = try await SettingsReader(flags: self.flags, environment: self.environment, file: self.file)
        let settings = try BridgeSettings.load(from: reader)
        return (settings, reader.setValues)
    }
}
