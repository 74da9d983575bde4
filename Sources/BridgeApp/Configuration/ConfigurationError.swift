import Configuration
import Foundation
import Synchronization
import SystemPackage
import Yams

/// A configuration value that cannot be used, named by its key (and the environment variable
/// that sets the same key), so that the operator knows what to fix.
package struct ConfigurationError: Error, CustomStringConvertible, Equatable {
    package var key: String
    package var message: String

    package init(key: String, _ message: String) {
        self.key = key
        self.message = message
    }

    package var description: String {
        "configuration key \(self.key) (environment \(SettingsReader.environmentVariable(for: self.key))): \(self.message)"
    }
    /// A refusal about a key of the schema (ConfigurationSchema.swift).
    init(_ key: ConfigurationKey, _ message: String) {
        self.init(key: key.name, message)
    }

    /// A refusal about the configuration file as a whole (`--config`), not one key in it.
    static func configurationFile(_ message: String) -> ConfigurationError {
        ConfigurationError(key: "--config", message)
    }
}
