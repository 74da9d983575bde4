import Foundation
import Testing

/// The docs are the normative description of the bridge, and the code points at them by anchor
/// (`docs/protocol.md#resend-records`). These checks keep every such pointer, in the sources,
/// the tests and the docs' own links, leading somewhere, and keep the repository free of
/// pointers to documents it does not hold.
@Suite("Documentation links")
struct DocumentationLinksTests {
    static let root = Repository.root

    /// The files under `directory` (relative to the root) whose names end with one of `suffixes`.
    static func files(under directory: String, endingWith suffixes: [String]) -> [String] {
        let base = Self.root.appendingPathComponent(directory)
        guard let walker = FileManager.default.enumerator(atPath: base.path) else { return [] }
        return walker.compactMap { $0 as? String }
            .filter { path in suffixes.contains { path.hasSuffix($0) } && !path.contains("FuzzCorpus") }
            .map { directory + "/" + $0 }
    }

    static func read(_ path: String) throws -> String {
        try String(contentsOf: Self.root.appendingPathComponent(path), encoding: .utf8)
    }

    /// The anchors a Markdown file offers: explicit `<a id="…">` and its headings' slugs as
    /// GitHub makes them (lowercase; letters, digits, spaces, hyphens and underscores kept;
    /// spaces become hyphens).
    static func anchors(of markdown: String) -> Set<String> {
        var anchors = Set<String>()
        for match in markdown.matches(of: /<a id="([^"]+)"><\/a>/) {
            anchors.insert(String(match.output.1))
        }
        for line in markdown.split(separator: "\n") where line.hasPrefix("#") {
            let title = line.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces).lowercased()
            let kept = title.filter { $0.isLetter || $0.isNumber || $0 == " " || $0 == "-" || $0 == "_" }
            anchors.insert(kept.replacingOccurrences(of: " ", with: "-"))
        }
        return anchors
    }

    struct Reference: CustomStringConvertible {
        var from: String
        var document: String
        var anchor: String?
        var description: String { "\(self.from) → \(self.document)\(self.anchor.map { "#\($0)" } ?? "")" }
    }

    /// `docs/<name>.md` or `docs/<name>.md#<anchor>` in sources, tests, scripts and configuration files.
    static func codeReferences() throws -> [Reference] {
        let paths =
            ["Sources", "Tests", "deploy", "scripts", "Benchmarks"].flatMap {
                Self.files(under: $0, endingWith: [".swift", ".py", ".yaml", ".yml", ".service", ".json", ".sh"])
            } + ["Package.swift", ".ci/run", "scripts/test", "scripts/path-files"]
        var references: [Reference] = []
        for path in Set(paths) {
            guard let text = try? Self.read(path) else { continue }
            for match in text.matches(of: /docs\/([A-Za-z0-9_-]+\.md)(?:#([a-z0-9_-]+))?/) {
                references.append(
                    Reference(from: path, document: "docs/" + match.output.1, anchor: match.output.2.map(String.init))
                )
            }
        }
        return references
    }

    /// Relative Markdown links (`[text](file.md#anchor)`, `[text](#anchor)`) in README.md and docs/.
    static func markdownReferences() throws -> [Reference] {
        let paths = ["README.md"] + Self.files(under: "docs", endingWith: [".md"])
        var references: [Reference] = []
        for path in paths {
            let text = try Self.read(path)
            let directory = (path as NSString).deletingLastPathComponent
            for match in text.matches(of: /\]\(([A-Za-z0-9_.\/-]*)(?:#([A-Za-z0-9_-]+))?\)/) {
                let target = String(match.output.1)
                guard !target.contains("://"), target.isEmpty || target.hasSuffix(".md") else { continue }
                let document = target.isEmpty ? path : (directory.isEmpty ? target : directory + "/" + target)
                references.append(
                    Reference(
                        from: path,
                        document: (document as NSString).standardizingPath,
                        anchor: match.output.2.map(String.init)
                    )
                )
            }
        }
        return references
    }

    @Test(
        "Every docs/…md#anchor the code names, and every link between the docs, leads to a document and an anchor that exist"
    )
    func referencesResolve() throws {
        let references = try Self.codeReferences() + Self.markdownReferences()
        #expect(references.count > 50, "the scan found only \(references.count) references: is it reading the tree?")
        var anchorsByDocument: [String: Set<String>] = [:]
        for reference in references {
            if anchorsByDocument[reference.document] == nil, let text = try? Self.read(reference.document) {
                anchorsByDocument[reference.document] = Self.anchors(of: text)
            }
            guard let anchors = anchorsByDocument[reference.document] else {
                Issue.record("no such document: \(reference)")
                continue
            }
            if let anchor = reference.anchor {
                #expect(anchors.contains(anchor), "no such anchor: \(reference)")
            }
        }
    }

    @Test("No source, test or doc points at a document outside the repository")
    func noOutsideDocuments() throws {
        let paths =
            ["Sources", "Tests", "docs", "deploy", "scripts"].flatMap {
                Self.files(under: $0, endingWith: [".swift", ".py", ".md", ".yaml", ".yml", ".service", ".sh"])
            } + ["README.md", "Package.swift", ".ci/run"]
        // Spelt in pieces, so that this file does not find itself.
        let contract = "CONTRACT" + " "
        let shared = "../" + "shared/"
        for path in paths {
            guard let text = try? Self.read(path) else { continue }
            #expect(
                !text.contains(contract + "§") && !text.contains(contract + "1."),
                "\(path) cites the product owner's contract, not docs/"
            )
            #expect(!text.contains(shared), "\(path) points outside the repository")
        }
    }
}
