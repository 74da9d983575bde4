import Configuration
import Foundation
import Synchronization
import SystemPackage
import Yams

/// Reads the bridge's settings from one place where flags, then environment variables, then
/// the configuration file are consulted, in that order (swift-configuration's `ConfigReader`
/// over three providers).
///
/// Every value is read as text and parsed here, so that a value of the wrong shape is an error
/// naming its key rather than a silent fallback to the default.
package struct SettingsReader: Sendable {
    /// Environment variables start with this, then the key in upper case with `_` between words:
    /// `gateway.listen` is `APNS_BRIDGE_GATEWAY_LISTEN`.
    package static let environmentPrefix = "APNS_BRIDGE_"

    private let reader: ConfigReader
    /// Every key set in the file and by flags, to find the ones nothing reads (typos).
    private let setKeys: [String]
    /// Every key the settings asked for so far.
    private let requested = RequestedKeys()
    /// What each key of the file holds (a single value, a list, or a mapping of further keys),
    /// to refuse a value of the wrong shape instead of reading it as unset.
    private let fileShapes: [String: YAMLShape]
    /// Keys read so far whose file value had the wrong shape.
    private let wrongShapes = WrongShapes()

    /// - Parameters:
    ///   - flags: values given on the command line, by key.
    ///   - environment: the process environment (only `APNS_BRIDGE_*` variables are read).
    ///   - file: a YAML configuration file, if any.
    package init(flags: [String: String], environment: [String: String], file: String?) async throws {
        var providers: [any ConfigProvider] = [
            InMemoryProvider(
                name: "flags",
                values: Dictionary(
                    uniqueKeysWithValues: flags.map {
                        (
                            AbsoluteConfigKey($0.key.split(separator: ".").map(String.init)),
                            ConfigValue(.string($0.value), isSecret: false)
                        )
                    }
                )
            ),
            EnvironmentVariablesProvider(environmentVariables: environment).prefixKeys(with: ConfigKey(["apnsBridge"])),
        ]
        var setKeys = Array(flags.keys)
        var fileShapes: [String: YAMLShape] = [:]
        if let file {
            guard FileManager.default.isReadableFile(atPath: file) else {
                throw ConfigurationError.configurationFile("cannot read \(file)")
            }
            do {
                providers.append(try await FileProvider<YAMLSnapshot>(filePath: .init(file)))
                let text = try String(contentsOfFile: file, encoding: .utf8)
                setKeys += try Self.keys(ofYAML: text)
                fileShapes = try Self.shapes(ofYAML: text)
            } catch {
                throw ConfigurationError.configurationFile("\(file) is not a valid configuration file: \(error)")
            }
        }
        self.reader = ConfigReader(providers: providers)
        self.setKeys = setKeys
        self.fileShapes = fileShapes
    }

    /// What a YAML node holds.
    enum YAMLShape: String {
        case scalar = "a single value"
        case sequence = "a list"
        case mapping = "a mapping of keys"
    }

    /// The shape of every node of a YAML document by its dotted key.
    static func shapes(ofYAML text: String) throws -> [String: YAMLShape] {
        func walk(_ node: Node, _ path: [String], into shapes: inout [String: YAMLShape]) {
            let key = path.joined(separator: ".")
            switch node {
            case .mapping(let mapping):
                if !path.isEmpty { shapes[key] = .mapping }
                for (child, value) in mapping {
                    walk(value, path + [child.string ?? "\(child)"], into: &shapes)
                }
            case .sequence:
                shapes[key] = .sequence
            default:
                shapes[key] = .scalar
            }
        }
        var shapes: [String: YAMLShape] = [:]
        if let root = try Yams.compose(yaml: text) {
            walk(root, [], into: &shapes)
        }
        return shapes
    }

    /// The first key read so far whose value in the file has a shape its reading cannot take (a
    /// list where one value belongs, a mapping where a list does): such a value would otherwise
    /// read as unset and the default would apply without a word.
    package var wrongShape: ConfigurationError? {
        self.wrongShapes.first
    }

    /// Records `key` as wrongly shaped if the file holds something other than `expected` there.
    private func checkShape(_ key: String, allowed: Set<YAMLShape>) {
        guard let found = self.fileShapes[key], !allowed.contains(found) else { return }
        let expected = allowed.contains(.sequence) ? "a list (or one value)" : "a single value"
        self.wrongShapes.append(
            ConfigurationError(key: key, "the file gives \(found.rawValue) where \(expected) belongs")
        )
    }

    /// The dotted keys a YAML document sets: the paths to its leaves through nested mappings
    /// (a sequence is a leaf: one list value).
    static func keys(ofYAML text: String) throws -> [String] {
        func walk(_ node: Node, _ path: [String], into keys: inout [String]) {
            if case .mapping(let mapping) = node {
                for (key, value) in mapping {
                    walk(value, path + [key.string ?? "\(key)"], into: &keys)
                }
            } else if !path.isEmpty {
                keys.append(path.joined(separator: "."))
            }
        }
        var keys: [String] = []
        if let root = try Yams.compose(yaml: text) {
            walk(root, [], into: &keys)
        }
        return keys
    }

    /// The keys set in the file or by flags that are not in `known` (typos, or keys of another
    /// version), each with the nearest known key, if one is close.
    package func unknownKeys(known: Set<String>) -> [(key: String, nearest: String?)] {
        Set(self.setKeys).subtracting(known).sorted().map { key in
            (key, Self.nearest(to: key, in: known))
        }
    }

    /// The known key closest to `key` by edit distance, if within a third of its length; else
    /// the shortest known key that begins with it (a unit left off: `retryBudget`).
    static func nearest(to key: String, in known: Set<String>) -> String? {
        Self.nearestByDistance(to: key, in: known)
            ?? known.filter { $0.lowercased().hasPrefix(key.lowercased()) }.min { ($0.count, $0) < ($1.count, $1) }
    }

    private static func nearestByDistance(to key: String, in known: Set<String>) -> String? {
        let limit = Swift.max(2, key.count / 3)
        var best: (key: String, distance: Int)?
        for candidate in known.sorted() {
            let distance = Self.editDistance(candidate.lowercased(), key.lowercased())
            guard distance <= limit else { continue }
            if best == nil || distance < best!.distance {
                best = (candidate, distance)
            }
        }
        return best?.key
    }

    /// Every key the settings have asked for so far (tests compare it with the known keys).
    package var requestedKeys: Set<String> {
        Set(self.requested.values.keys)
    }

    /// The value each key asked for so far had (`nil`: not set), as text; secrets as a hash.
    /// A reload compares them to tell what changed.
    package var requestedValues: [String: String?] {
        self.requested.values
    }

    /// The keys read so far that had a value, in order, each with its value as read (a list
    /// comma-separated); a secret's value is not shown. What `check-config` prints under `set`.
    package var setValues: [(key: String, value: String)] {
        self.requested.values.compactMap { key, value in
            guard let value else { return nil }
            return (key, value.hasPrefix(Self.secretPrefix) ? "(secret, not shown)" : value)
        }.sorted { $0.key < $1.key }
    }

    /// How ``requestedValues`` holds a secret: a hash after this prefix.
    private static let secretPrefix = "secret#"

    /// Levenshtein distance.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var current = [Int](repeating: 0, count: b.count + 1)
            current[0] = i
            for j in 1...b.count {
                let substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)
                current[j] = Swift.min(previous[j] + 1, current[j - 1] + 1, substitution)
            }
            previous = current
        }
        return previous[b.count]
    }

    /// The environment variable that sets `key`.
    package static func environmentVariable(for key: String) -> String {
        if key == "--config" { return "APNS_BRIDGE_CONFIG" }  // the file itself, read by the command
        var name = Self.environmentPrefix
        var previousWasLowercase = false
        for character in key {
            if character == "." || character == "-" || character == "_" {
                name.append("_")
                previousWasLowercase = false
            } else {
                if character.isUppercase, previousWasLowercase { name.append("_") }
                name.append(contentsOf: character.uppercased())
                previousWasLowercase = character.isLowercase
            }
        }
        return name
    }

    // MARK: Typed reads

    package func string(_ key: String, secret: Bool = false) -> String? {
        guard let value = self.reader.string(forKey: Self.configKey(key), isSecret: secret) else {
            self.requested.insert(key, value: nil)
            self.checkShape(key, allowed: [.scalar])
            return nil
        }
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        // A secret is remembered only as a hash, enough to tell a reload that it changed.
        self.requested.insert(
            key,
            value: trimmed.isEmpty ? nil : secret ? "\(Self.secretPrefix)\(trimmed.hashValue)" : trimmed
        )
        return trimmed.isEmpty ? nil : trimmed
    }

    package func string(_ key: String, default value: String) -> String {
        self.string(key) ?? value
    }

    /// A list: a YAML sequence, or comma-separated text (environment variables, flags).
    package func list(_ key: String) -> [String] {
        let components = Self.configKey(key)
        if let array = self.reader.stringArray(forKey: components) {
            let values = array.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            self.requested.insert(key, value: values.joined(separator: ","))
            return values
        }
        guard let text = self.reader.string(forKey: components) else {
            self.requested.insert(key, value: nil)
            self.checkShape(key, allowed: [.scalar, .sequence])
            return []
        }
        let values = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        self.requested.insert(key, value: values.isEmpty ? nil : values.joined(separator: ","))
        return values
    }

    package func int(_ key: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        guard let text = self.string(key) else { return value }
        guard Self.isPlainDecimal(text, fraction: false), let number = Int(text), range.contains(number) else {
            throw ConfigurationError(
                key: key,
                "\"\(text)\" is not a whole number from \(range.lowerBound) to \(range.upperBound)"
            )
        }
        return number
    }

    /// A number of seconds (or of `unit`s of `secondsPerUnit` seconds) as a duration.
    package func seconds(
        _ key: String,
        default value: Double,
        range: ClosedRange<Double>,
        unit: String = "seconds",
        secondsPerUnit: Double = 1
    ) throws -> Duration {
        guard let text = self.string(key) else { return .milliseconds(Int64(value * secondsPerUnit * 1000)) }
        guard Self.isPlainDecimal(text, fraction: true), let number = Double(text), range.contains(number) else {
            throw ConfigurationError(
                key: key,
                "\"\(text)\" is not a number of \(unit) from \(range.lowerBound.formatted()) to \(range.upperBound.formatted())"
            )
        }
        return .milliseconds(Int64(number * secondsPerUnit * 1000))
    }

    package func bool(_ key: String, default value: Bool) throws -> Bool {
        guard let text = self.string(key) else { return value }
        switch text.lowercased() {
        case "true", "yes", "on", "1": return true
        case "false", "no", "off", "0": return false
        default: throw ConfigurationError(key: key, "\"\(text)\" is not true or false")
        }
    }

    package func choice<T>(_ key: String, default value: T, _ choices: [String: T]) throws -> T {
        guard let text = self.string(key) else { return value }
        guard let chosen = choices[text.lowercased()] else {
            throw ConfigurationError(
                key: key,
                "\"\(text)\" is not one of \(choices.keys.sorted().joined(separator: ", "))"
            )
        }
        return chosen
    }

    /// `HOST:PORT`, `[IPv6]:PORT`; `off` (when allowed) is `nil`.
    package func address(
        _ key: String,
        default value: String,
        allowOff: Bool = false
    ) throws -> (host: String, port: Int)? {
        let text = self.string(key) ?? value
        if allowOff, text.lowercased() == "off" { return nil }
        guard let parsed = Self.parseAddress(text) else {
            throw ConfigurationError(
                key: key,
                "\"\(text)\" is not HOST:PORT (port 0 to 65535\(allowOff ? ", or off" : ""))"
            )
        }
        return parsed
    }

    /// A file that must exist and be readable.
    package func file(_ key: String) throws -> String? {
        guard let path = self.string(key) else { return nil }
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw ConfigurationError(key: key, "cannot read the file \(path)")
        }
        return path
    }

    package func requiredFile(_ key: String, why: String) throws -> String {
        guard let path = try self.file(key) else { throw ConfigurationError(key: key, "missing: \(why)") }
        return path
    }

    /// Names used as key components (tenants, credentials): letters, digits, `-` and `_`.
    package func names(_ key: String) throws -> [String] {
        let names = self.list(key)
        for name in names
        where name.isEmpty || !name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
        {
            throw ConfigurationError(key: key, "\"\(name)\" is not a name of letters, digits, - and _")
        }
        if Set(names).count != names.count {
            throw ConfigurationError(key: key, "a name is listed twice")
        }
        return names
    }

    private static func configKey(_ key: String) -> ConfigKey {
        ConfigKey(key.split(separator: ".").map(String.init))
    }
}

/// Keys whose value had the wrong shape, in the order they were read.
private final class WrongShapes: Sendable {
    private let storage = Mutex([ConfigurationError]())

    func append(_ error: ConfigurationError) {
        self.storage.withLock { $0.append(error) }
    }

    var first: ConfigurationError? {
        self.storage.withLock { $0.first }
    }
}

/// The keys a ``SettingsReader`` was asked for, with the values they had.
private final class RequestedKeys: Sendable {
    private let storage = Mutex([String: String?]())

    func insert(_ key: String, value: String?) {
        self.storage.withLock { $0[key] = .some(value) }
    }

    var values: [String: String?] {
        self.storage.withLock { $0 }
    }
}
