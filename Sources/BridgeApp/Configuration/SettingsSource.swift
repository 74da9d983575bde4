/// Where the settings come from (flags, `APNS_BRIDGE_*` variables, the file), kept so that a
/// reload reads them again the way start-up did.
package struct SettingsSource: Sendable {
    package var flags: [String: String]
    package var environment: [String: String]
    /// The YAML configuration file, if any.
    package var file: String?

    package init(flags: [String: String], environment: [String: String], file: String?) {
        self.flags = flags
        self.environment = environment
        self.file = file
    }

    /// Reads and checks the settings as they are now.
    package func load() async throws -> BridgeSettings {
        try await self.loadWithSetValues().settings
    }

    /// Reads and checks the settings, and says which keys were set, to what
    /// (``SettingsReader/setValues``).
    package func loadWithSetValues() async throws -> (settings: BridgeSettings, set: [(key: String, value: String)]) {
        let reader = try await SettingsReader(flags: self.flags, environment: self.environment, file: self.file)
        let settings = try BridgeSettings.load(from: reader)
        return (settings, reader.setValues)
    }
}
