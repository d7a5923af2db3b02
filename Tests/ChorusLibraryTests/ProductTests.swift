import Foundation
import Testing

/// What the `Chorus` product promises an app developer beyond compiling:
/// the README's embedding section is the example app, and every public
/// symbol an app can see is documented.
@Suite("The Chorus product")
struct ProductTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test("the README's embedding example is Examples/ChorusApp's main.swift, byte for byte")
    func readmeIsTheExampleApp() throws {
        let readme = try String(contentsOf: Self.root.appendingPathComponent("README.md"), encoding: .utf8)
        let app = try String(contentsOf: Self.root.appendingPathComponent("Examples/ChorusApp/Sources/ChorusApp/main.swift"), encoding: .utf8)
        let marker = "whole of `Examples/ChorusApp`"
        let section = try #require(readme.range(of: marker), "the README names the example app")
        let open = try #require(readme.range(of: "```swift\n", range: section.upperBound..<readme.endIndex))
        let close = try #require(readme.range(of: "```\n", range: open.upperBound..<readme.endIndex))
        #expect(String(readme[open.upperBound..<close.lowerBound]) == app)
    }

    /// The modules `import Chorus` re-exports, read from Sources/Chorus.
    static func exportedModules() throws -> [String] {
        let dir = root.appendingPathComponent("Sources/Chorus")
        var modules: [String] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: dir.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: dir.appendingPathComponent(file), encoding: .utf8)
            for line in text.split(separator: "\n") where line.hasPrefix("@_exported import ") {
                modules.append(String(line.dropFirst("@_exported import ".count)).trimmingCharacters(in: .whitespaces))
            }
        }
        return modules.sorted()
    }

    /// Public declarations without a `///` (or `/** */`) comment right above
    /// them; attribute lines may stand between.
    static func undocumented(in module: String) throws -> [String] {
        let dir = root.appendingPathComponent("Sources/\(module)")
        guard let files = FileManager.default.enumerator(atPath: dir.path) else { return [] }
        var out: [String] = []
        for case let file as String in files where file.hasSuffix(".swift") {
            let lines = try String(contentsOf: dir.appendingPathComponent(file), encoding: .utf8).components(separatedBy: "\n")
            for (i, raw) in lines.enumerated() {
                let line = raw.trimmingCharacters(in: .whitespaces)
                guard isPublicDeclaration(line) else { continue }
                var j = i - 1
                while j >= 0, lines[j].trimmingCharacters(in: .whitespaces).hasPrefix("@") { j -= 1 }
                let above = j >= 0 ? lines[j].trimmingCharacters(in: .whitespaces) : ""
                if !(above.hasPrefix("///") || above.hasSuffix("*/")) { out.append("\(module)/\(file):\(i + 1): \(line.prefix(90))") }
            }
        }
        return out
    }

    static func isPublicDeclaration(_ line: String) -> Bool {
        var rest = Substring(line)
        // Attributes on the same line: @inlinable, @discardableResult, @available(…).
        while rest.hasPrefix("@") {
            guard let space = rest.firstIndex(of: " ") else { return false }
            if let paren = rest.firstIndex(of: "("), paren < space, let closing = rest.firstIndex(of: ")") {
                rest = rest[rest.index(after: closing)...].drop { $0 == " " }
            } else {
                rest = rest[space...].drop { $0 == " " }
            }
        }
        guard rest.hasPrefix("public ") || rest.hasPrefix("open ") else { return false }
        let afterModifier = rest.drop { $0 != " " }.drop { $0 == " " }
        return !(afterModifier.hasPrefix("import ") || afterModifier.hasPrefix("extension "))
    }

    @Test("every public declaration of the modules `import Chorus` brings has a doc comment")
    func publicSymbolsAreDocumented() throws {
        let modules = try Self.exportedModules()
        #expect(modules.count >= 6)
        var missing: [String] = []
        for module in modules { missing += try Self.undocumented(in: module) }
        let list = missing.prefix(40).joined(separator: "\n")
        #expect(missing.isEmpty, "\(missing.count) undocumented:\n\(list)")
    }
}
