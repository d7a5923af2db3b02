import ChorusCrypto
import ChorusEvents
@testable import ChorusProjections
import ChorusTestSupport
import Foundation
import Testing

/// Specs/adding-a-kind.md: the steps of adding a kind that the compiler
/// does not enforce, checked for every known kind, so that a kind added
/// without one of them fails here instead of passing unnoticed.
@Suite("Adding a kind: every known kind has each step the compiler does not check")
struct KindChecklistTests {
    static func text(_ path: String) throws -> String {
        try String(contentsOf: repositoryRoot.appendingPathComponent(path), encoding: .utf8)
    }

    @Test("Specs/events.md §6 has each kind's row (code, name, purgeable) and payload section; Specs/projections.md names its rule")
    func specsDescribeEveryKind() throws {
        let events = try Self.text("Specs/events.md")
        let lines = events.split(separator: "\n").map(String.init)
        let projections = try Self.text("Specs/projections.md")
        // Its rules (§6), which name a kind or a family of kinds (`picture.*`).
        guard let rulesStart = projections.range(of: "\n## 6. "), let rulesEnd = projections.range(of: "\n## 7. ") else {
            Issue.record("Specs/projections.md has no §6 Rules followed by §7")
            return
        }
        let rules = projections[rulesStart.lowerBound..<rulesEnd.lowerBound]
        for kind in EventKind.known {
            let cells = lines.first { $0.hasPrefix("| \(kind.code) | `\(kind.name)` |") }?
                .split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let cells, cells.count >= 5 else {
                Issue.record("Specs/events.md §6 has no row `| \(kind.code) | `\(kind.name)` | …` (step 2)")
                continue
            }
            #expect((cells[4] == "**yes**") == kind.payloadIsPurgeable, "\(kind.name): the §6 row's purgeable column is \(cells[4])")
            #expect(
                lines.contains { $0.hasPrefix("#### 6.2.") && $0.contains("`\(kind.name)` (\(kind.code))") },
                "Specs/events.md has no §6.2 payload section for \(kind.name) (step 2)")
            let parts = kind.name.split(separator: ".")
            let families = (1..<parts.count).map { parts.prefix($0).joined(separator: ".") + ".*" }
            let named = ([kind.name] + families).contains { rules.contains("`\($0)`") }
            #expect(named, "Specs/projections.md §6 names no rule for \(kind.name) (step 3)")
        }
    }

    @Test("each kind's roles agree with the Specs: its addressees with Specs/sync.md §4.11's table, a directory kind with §8.1 (step 5)")
    func rolesAgreeWithTheSpecs() throws {
        let sync = try Self.text("Specs/sync.md")
        guard let start = sync.range(of: "\n### 4.11 "), let end = sync.range(of: "\n### 4.12 ") else {
            Issue.record("Specs/sync.md has no §4.11 followed by §4.12")
            return
        }
        let rows = sync[start.lowerBound..<end.lowerBound].split(separator: "\n").filter { $0.hasPrefix("| `") }
        for kind in EventKind.known {
            let row = rows.first { $0.contains("`\(kind.name)` (\(kind.code))") }
            let addressees = row.map { String($0.split(separator: "|").last ?? "") } ?? ""
            switch kind.addressing {
            case .none: #expect(row == nil, "\(kind.name) is addressed to nobody, but §4.11's table lists it")
            case .objectUser: #expect(addressees.contains("`object`"), "\(kind.name): §4.11 should say `object`")
            case .payloadMembers: #expect(addressees.contains("`members`"), "\(kind.name): §4.11 should say the payload's `members`")
            case .payloadUser: #expect(addressees.contains("`user`"), "\(kind.name): §4.11 should say the payload's `user`")
            case .wrappedDevices: #expect(addressees.contains("wrap"), "\(kind.name): §4.11 should say each wrap's device")
            }
        }
        // §8.1 rule 2 names the kinds a directory feed keeps.
        guard let hosting = sync.range(of: "\n### 8.1 "), let rule = sync[hosting.upperBound...].range(of: "Of such a feed it keeps only") else {
            Issue.record("Specs/sync.md §8.1 no longer says which kinds a directory feed keeps")
            return
        }
        let sentence = sync[rule.lowerBound...].prefix { $0 != ";" }
        for kind in EventKind.known {
            #expect(sentence.contains("`\(kind.name)`") == kind.isDirectoryKind, "\(kind.name): §8.1 and isDirectoryKind disagree")
        }
    }

    @Test("each kind is signed in Specs/vectors: a valid event vector, or an event of a projection vector that pins its rule")
    func vectorsCoverEveryKind() throws {
        var covered = Set(try EventVectorFile.load().valid.compactMap { EventKind(name: $0.kind) })
        struct ProjectionVectors: Decodable {
            struct Vector: Decodable { let events: [String] }
            let vectors: [Vector]
        }
        let projections = try JSONDecoder().decode(ProjectionVectors.self, from: Data(contentsOf: specVector("projections.json")))
        for vector in projections.vectors {
            for envelope in vector.events { covered.insert(try Event.decode(hex(envelope)).kind) }
        }
        let missing = EventKind.known.filter { !covered.contains($0) }.map(\.name)
        #expect(missing.isEmpty, "no event of \(missing) in Specs/vectors/events.json or projections.json (steps 14, 15)")
    }

    @Test("the property tests' random worlds sign every kind, so convergence covers it")
    func randomWorldsSignEveryKind() throws {
        var signed: Set<EventKind> = []
        for seed in UInt64(1)...40 where signed.count < EventKind.known.count {
            signed.formUnion(try World(seed: seed).events.map(\.kind))
        }
        let missing = EventKind.known.filter { !signed.contains($0) }.map(\.name)
        #expect(missing.isEmpty, "World.swift never signs \(missing) (step 16)")
    }

    /// For each projection format, the BLAKE2b-256 of the projection
    /// vectors' bytes and the layout fingerprint of the tables: vectors
    /// (a rule) or tables that change under an unchanged format fail here.
    static let recordedByFormat: [UInt64: (vectors: String, layout: String)] = [
        24: (vectors: "50dec3b8edd84e7b660863e30e9070554f11fbfd135188ed31cc61810a376454", layout: "6c24e0818f80093a0c9c576cf5d6c8262638a437e1697469bdd23592e76a1574"),
        25: (vectors: "50dec3b8edd84e7b660863e30e9070554f11fbfd135188ed31cc61810a376454", layout: "fdcd58988c6b18de667328460e1199359098b29378539171357419fbfe884000"),
        26: (vectors: "32d90163ed5c98d886b0d96c226cea075e8b96c2662b32fa74704781e750cf0c", layout: "df4319ee82048b826a74e10d3837684d21b2aee6a141deedbedd9fe8cd030669"),
        27: (vectors: "32d90163ed5c98d886b0d96c226cea075e8b96c2662b32fa74704781e750cf0c", layout: "616b8b3942aba25ec7a7bc226954cf2b65de31248fb67942671446fa489cee49"),
    ]

    @Test("the projection vectors and the tables' layout change only with the projection format (step 17)")
    func projectionsChangeWithTheFormat() throws {
        let vectors = Blake2b.hash256([UInt8](try Data(contentsOf: specVector("projections.json")))).hex
        let layout = Projections.layoutFingerprint.hex
        let format = Projections.formatVersion
        let recorded = Self.recordedByFormat[format]
        #expect(
            recorded?.vectors == vectors && recorded?.layout == layout,
            """
            projection format \(format) was recorded with other vectors or tables (now: vectors \(vectors), layout \(layout)): \
            when a rule or a table changed, bump Projections.formatVersion (stores of the old format rebuild on open) and \
            record both under the new format in KindChecklistTests.recordedByFormat
            """)
    }
}
