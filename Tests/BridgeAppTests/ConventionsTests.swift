import Foundation
import Testing

/// Conventions the repository keeps, checked against the tree: a newcomer finds a public or
/// package type by its name, in the folder docs/internals.md gives for it ("Where each type lives").
@Suite("Conventions")
struct ConventionsTests {
    static let root = Repository.root

    /// Each public or package type declared at the top level of a file under Sources/, with
    /// the file's path relative to the root.
    static func declaredTypes() throws -> [(type: String, path: String)] {
        let sources = Self.root.appendingPathComponent("Sources")
        guard let walker = FileManager.default.enumerator(atPath: sources.path) else { return [] }
        var found: [(type: String, path: String)] = []
        for case let relative as String in walker where relative.hasSuffix(".swift") {
            let text = try String(contentsOf: sources.appendingPathComponent(relative), encoding: .utf8)
            for line in text.split(separator: "\n", omittingEmptySubsequences: false)
            where line.hasPrefix("public ") || line.hasPrefix("package ") {
                if let match = line.wholeMatch(
                    of: /(?:public|package) (?:final )?(?:struct|class|enum|protocol|actor) ([A-Za-z_][A-Za-z0-9_]*).*/
                ) {
                    found.append((String(match.output.1), "Sources/" + relative))
                }
            }
        }
        return found
    }

    /// The types docs/internals.md places in another type's file: `` `Type` (in `File.swift` ``.
    static func placedBeside() throws -> [String: String] {
        let internals = try String(contentsOf: Self.root.appendingPathComponent("docs/internals.md"), encoding: .utf8)
        var placed: [String: String] = [:]
        for match in internals.matches(of: /`([A-Za-z_][A-Za-z0-9_]*)` \(in `([A-Za-z0-9_+]+\.swift)`/) {
            placed[String(match.output.1)] = String(match.output.2)
        }
        return placed
    }

    @Test(
        "Every public or package type is declared in a file named after it, or in the file docs/internals.md names for it, beside a type of that name"
    )
    func typesInTheirFiles() throws {
        let types = try Self.declaredTypes()
        #expect(types.count > 100, "the scan found only \(types.count) types: is it reading the tree?")
        let placed = try Self.placedBeside()
        #expect(!placed.isEmpty, "the scan found no type placed beside another: is it reading docs/internals.md?")
        for (type, path) in types {
            let file = (path as NSString).lastPathComponent
            if let beside = placed[type] {
                #expect(file == beside, "\(type) is declared in \(path), docs/internals.md says \(beside)")
                let main = (beside as NSString).deletingPathExtension
                let text = try String(contentsOf: Self.root.appendingPathComponent(path), encoding: .utf8)
                #expect(
                    text.contains(try Regex(#"(class|struct|enum|protocol) \#(main)\b"#)),
                    "\(type) is placed beside \(main), which \(path) does not declare"
                )
            } else {
                #expect(file == type + ".swift", "\(type) is declared in \(path)")
            }
        }
    }

    @Test("Only the modules Package.swift makes library products of declare anything public")
    func publicOnlyInLibraries() throws {
        let manifest = try String(contentsOf: Self.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let libraries = Set(manifest.matches(of: /\.library\(name: "([A-Za-z]+)"/).map { String($0.output.1) })
        #expect(libraries.contains("UpstreamAPNs"), "the scan found the libraries \(libraries)")
        // The fuzzers' C entry points are public so that libFuzzer's driver links them.
        let entryPoints: Set<String> = ["LegacyProtocolFuzzer", "UpstreamEngineFuzzer"]
        let sources = Self.root.appendingPathComponent("Sources")
        guard let walker = FileManager.default.enumerator(atPath: sources.path) else { return }
        var offenders: Set<String> = []
        for case let relative as String in walker where relative.hasSuffix(".swift") {
            let module = String(relative.prefix { $0 != "/" })
            guard !libraries.contains(module), !entryPoints.contains(module) else { continue }
            let text = try String(contentsOf: sources.appendingPathComponent(relative), encoding: .utf8)
            for line in text.split(separator: "\n")
            where line.contains(/^\s*(?:@[A-Za-z]+(?:\([^)]*\))?\s+)*(?:(?:final|static|nonisolated)\s+)*public\s/) {
                offenders.insert("Sources/" + relative)
            }
        }
        #expect(offenders.sorted() == [], "public API outside the library products: make it `package`")
    }

    @Test("docs/internals.md lists every public or package type under the folder it lives in, and no other")
    func architectureListsTypes() throws {
        let architecture = try String(
            contentsOf: Self.root.appendingPathComponent("docs/internals.md"),
            encoding: .utf8
        )
        var listed: Set<String> = []
        for line in architecture.split(separator: "\n") {
            guard let match = line.wholeMatch(of: /- `(Sources\/[^`]+\/)`: (.*)/) else { continue }
            for type in match.output.2.matches(of: /`([A-Za-z_][A-Za-z0-9_]*)`/) {
                listed.insert(String(match.output.1) + String(type.output.1))
            }
        }
        let declared = Set(
            try Self.declaredTypes().map { ($0.path as NSString).deletingLastPathComponent + "/" + $0.type }
        )
        #expect(declared.subtracting(listed).sorted() == [], "declared but not listed in docs/internals.md")
        #expect(listed.subtracting(declared).sorted() == [], "listed in docs/internals.md but not declared there")
    }
}
