import ChorusTestSupport
import Foundation
import Testing

/// Adds a probe kind (and, apart, a probe object class) to a copy of the
/// sources and type-checks it with the compiler the suite was built with:
/// the steps of Specs/adding-a-kind.md
/// marked **(compiler)** must each be needed (leaving any one out does not
/// compile), they must be every exhaustive `switch` over kinds in
/// `Sources/` (a new one is a new step, to be listed there and here), and
/// with all of them done every module that reads kinds must compile. The
/// steps the compiler cannot enforce are held by `KindChecklistTests` for
/// every kind in `EventKind.known`.
@Suite("Adding a kind: a probe kind shows which steps the compiler enforces")
struct ProbeKindTests {
    /// One step the compiler enforces: the arm a new kind adds to the
    /// exhaustive `switch` in `member` of `file`.
    struct Step: CustomStringConvertible {
        let module: String
        let file: String
        let member: String
        let arm: String
        var description: String { "\(module)/\(file) \(member)" }
    }

    /// Where a probe is declared: `declaration` inserted after `anchor` in
    /// `file` of `module`.
    struct Declaration {
        let module: String
        let file: String
        let anchor: String
        let declaration: String
    }

    static let probeKind = Declaration(
        module: "ChorusEvents", file: "EventKind.swift", anchor: "    case relaysSet\n",
        declaration: "    /// A probe kind (ProbeKindTests).\n    case probe\n")

    static let probeClass = Declaration(
        module: "ChorusProjections", file: "Keys.swift", anchor: "enum ObjectClass: UInt8, CaseIterable {\n",
        declaration: "    case probe = 0xEE\n")

    /// The (compiler) steps of Specs/adding-a-kind.md that a new object
    /// class adds (steps 7–9): its fold order, its incremental and bulk
    /// folds, how a rebuild folds and loads it, and its name in history.
    static let classSteps: [Step] = [
        Step(module: "ChorusProjections", file: "Keys.swift", member: "foldRank", arm: "case .probe: 99"),
        Step(module: "ChorusProjections", file: "FoldRun.swift", member: "foldMarked", arm: "case .probe: break"),
        Step(module: "ChorusProjections", file: "FoldRun.swift", member: "foldInBulk", arm: "case .probe: break"),
        Step(module: "ChorusProjections", file: "BulkFolding.swift", member: "foldOffTheWriteTransaction", arm: "case .probe: nil"),
        Step(module: "ChorusProjections", file: "BulkFolding.swift", member: "bulkFoldReadsPayload", arm: "case .probe: true"),
        Step(module: "ChorusProjections", file: "Inspection.swift", member: "className", arm: #"case .probe: "probe""#),
        Step(module: "ChorusProjections", file: "Projections.swift", member: "file", arm: "case .probe: run?.mark(cls, object)"),
    ]

    /// The (compiler) steps of Specs/adding-a-kind.md, for a probe kind in
    /// an existing class (a new class adds `classSteps`).
    static let steps: [Step] = [
        Step(module: "ChorusEvents", file: "EventKind.swift", member: "code", arm: "case .probe: 9_999"),
        Step(module: "ChorusEvents", file: "EventKind.swift", member: "name", arm: #"case .probe: "probe.kind""#),
        Step(module: "ChorusEvents", file: "EventKind.swift", member: "payloadIsPurgeable", arm: "case .probe: false"),
        Step(module: "ChorusEvents", file: "EventKind.swift", member: "addressing", arm: "case .probe: .none"),
        Step(module: "ChorusEvents", file: "EventKind.swift", member: "isDirectoryKind", arm: "case .probe: false"),
        Step(module: "ChorusEvents", file: "EventKind.swift", member: "chatKeyRole", arm: "case .probe: .none"),
        Step(module: "ChorusEvents", file: "EventKind.swift", member: "supersession", arm: "case .probe: .none"),
        // A probe shares a payload type; a real kind has its own (step 6).
        Step(module: "ChorusEvents", file: "Payloads.swift", member: "payloadType", arm: "case .probe: RelaysSetPayload.self"),
        Step(module: "ChorusProjections", file: "Keys.swift", member: "targets", arm: "case .probe: [(.profile, event.object)]"),
    ]

    @Test("leaving out any (compiler) step of a new kind fails to compile; with all of them, every module compiles", .timeLimit(.minutes(20)))
    func everyCompilerStepIsEnforced() async throws {
        let compiler = try Compiler()
        defer { compiler.cleanup() }
        let doc = try String(contentsOf: repositoryRoot.appendingPathComponent("Specs/adding-a-kind.md"), encoding: .utf8)
        for step in Self.steps {
            #expect(doc.contains("`\(step.file)`") || doc.contains(step.file), "Specs/adding-a-kind.md does not name \(step.file)")
        }

        // The declaration alone: the compiler names every switch a kind
        // must join, and those must be the steps listed.
        let bare = try compiler.variant("bare", probe: Self.probeKind, steps: [])
        let bareErrors = try await compiler.exhaustivenessErrors(module: "ChorusEvents", sources: bare.events)
        let eventSteps = Self.steps.filter { $0.module == "ChorusEvents" }
        #expect(bareErrors.count == eventSteps.count, "exhaustive switches over kinds in ChorusEvents: \(bareErrors); steps: \(eventSteps)")
        for step in eventSteps {
            #expect(bareErrors.contains { $0.file == step.file && $0.member == step.member }, "\(step) is not a switch the compiler enforces")
        }

        // Every step done: ChorusEvents compiles, and so does every module
        // that reads kinds (an exhaustive switch over kinds anywhere else
        // would fail here: a step this list and the doc lack).
        let complete = try compiler.variant("complete", probe: Self.probeKind, steps: Self.steps)
        try await compiler.emitModule("ChorusEvents", sources: complete.events)
        for module in try compiler.modulesAbove("ChorusEvents") {
            let sources = module == "ChorusProjections" ? complete.projections : compiler.sources(of: module)
            let result = try await compiler.typecheck(module, sources: sources)
            #expect(result.status == 0, "\(module) does not compile with the probe kind:\n\(result.stderr.prefix(3000))")
        }

        // Each step left out: a compile error at its switch.
        for step in Self.steps {
            let without = try compiler.variant("without-\(step.member)", probe: Self.probeKind, steps: Self.steps.filter { $0.member != step.member })
            let errors =
                step.module == "ChorusEvents"
                ? try await compiler.exhaustivenessErrors(module: "ChorusEvents", sources: without.events)
                : try await compiler.exhaustivenessErrors(module: step.module, sources: without.projections)
            #expect(errors.map { "\($0.file) \($0.member)" } == ["\(step.file) \(step.member)"], "without \(step): \(errors)")
        }
    }

    @Test("a new object class: leaving out any (compiler) step fails to compile; with all of them, the projections compile", .timeLimit(.minutes(20)))
    func everyClassStepIsEnforced() async throws {
        let compiler = try Compiler()
        defer { compiler.cleanup() }
        let doc = try String(contentsOf: repositoryRoot.appendingPathComponent("Specs/adding-a-kind.md"), encoding: .utf8)
        for step in Self.classSteps {
            #expect(doc.contains(step.member), "Specs/adding-a-kind.md does not name \(step.member)")
        }
        // The class alone: the compiler names every switch it must join.
        let bare = try compiler.variant("class-bare", probe: Self.probeClass, steps: [])
        let bareErrors = try await compiler.exhaustivenessErrors(module: "ChorusProjections", sources: bare.projections)
        #expect(
            Set(bareErrors.map(\.description)) == Set(Self.classSteps.map { "\($0.file) \($0.member)" }),
            "exhaustive switches over classes: \(bareErrors); steps: \(Self.classSteps)")
        let complete = try compiler.variant("class-complete", probe: Self.probeClass, steps: Self.classSteps)
        let result = try await compiler.typecheck("ChorusProjections", sources: complete.projections)
        #expect(result.status == 0, "ChorusProjections does not compile with the probe class:\n\(result.stderr.prefix(3000))")
        for step in Self.classSteps {
            let without = try compiler.variant(
                "class-without-\(step.member)", probe: Self.probeClass, steps: Self.classSteps.filter { $0.member != step.member })
            let errors = try await compiler.exhaustivenessErrors(module: "ChorusProjections", sources: without.projections)
            #expect(errors.map(\.description) == ["\(step.file) \(step.member)"], "without \(step): \(errors)")
        }
    }

    /// An error "switch must be exhaustive" with the file and the member
    /// whose body holds the switch.
    struct Exhaustiveness: Equatable, CustomStringConvertible {
        let file: String
        let member: String
        var description: String { "\(file) \(member)" }
    }

    /// The compiler and the modules the suite was built with, and a
    /// scratch directory of source variants.
    struct Compiler {
        let swiftc: String
        let modules: URL
        let moduleMaps: [String]
        let packageName: String
        let service: Bool
        let scratch: URL

        struct Variant {
            /// ChorusEvents' sources with the probe kind.
            let events: [String]
            /// ChorusProjections' sources with the probe's steps there.
            let projections: [String]
        }

        init() throws {
            guard let swiftc = Self.onPath("swiftc") else { throw TestFailure("no swiftc on PATH: the probe kind needs the compiler the suite was built with") }
            self.swiftc = swiftc
            // The test runner sits in the build's products directory, beside `Modules`.
            let runner = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            var dir = runner.deletingLastPathComponent()
            while !FileManager.default.fileExists(atPath: dir.appendingPathComponent("Modules/ChorusEvents.swiftmodule").path) {
                guard dir.pathComponents.count > 2 else { throw TestFailure("no Modules/ChorusEvents.swiftmodule above \(runner.path)") }
                dir = dir.deletingLastPathComponent()
            }
            modules = dir.appendingPathComponent("Modules")
            service = FileManager.default.fileExists(atPath: modules.appendingPathComponent("Hummingbird.swiftmodule").path)
            // C modules: the build's own maps, system libraries' and packages' maps.
            var maps: [String] = []
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? [] where entry.hasSuffix(".build") {
                let map = dir.appendingPathComponent(entry).appendingPathComponent("module.modulemap").path
                if FileManager.default.fileExists(atPath: map) { maps.append(map) }
            }
            let checkouts = dir.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("checkouts")
            for base in [repositoryRoot.appendingPathComponent("Sources"), checkouts] {
                if let walk = FileManager.default.enumerator(at: base, includingPropertiesForKeys: nil) {
                    for case let url as URL in walk where url.lastPathComponent == "module.modulemap" {
                        maps.append(url.path)
                    }
                }
            }
            moduleMaps = maps
            // SwiftPM names the root package after its directory (`package` access needs the same name).
            packageName = String(repositoryRoot.lastPathComponent.lowercased().map { $0.isLetter || $0.isNumber ? $0 : "_" })
            scratch = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("chorus-probe-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: scratch.appendingPathComponent("modules"), withIntermediateDirectories: true)
        }

        func cleanup() { try? FileManager.default.removeItem(at: scratch) }

        static func onPath(_ name: String) -> String? {
            for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":") {
                let path = "\(dir)/\(name)"
                if FileManager.default.isExecutableFile(atPath: path) { return path }
            }
            return nil
        }

        func sources(of module: String) -> [String] {
            let dir = repositoryRoot.appendingPathComponent("Sources/\(module)")
            let walk = FileManager.default.enumerator(at: dir, includingPropertiesForKeys: nil)
            return (walk?.compactMap { ($0 as? URL)?.path }.filter { $0.hasSuffix(".swift") } ?? []).sorted()
        }

        /// The Swift modules in Sources that import `module`, directly or through another.
        func modulesAbove(_ module: String) throws -> [String] {
            let root = repositoryRoot.appendingPathComponent("Sources")
            var imports: [String: Set<String>] = [:]
            for name in try FileManager.default.contentsOfDirectory(atPath: root.path) {
                let files = sources(of: name)
                guard !files.isEmpty else { continue }
                for file in files {
                    for line in try String(contentsOfFile: file, encoding: .utf8).split(separator: "\n") {
                        let words = line.split(separator: " ")
                        if let i = words.firstIndex(of: "import"), i + 1 < words.count, i == 0 || words[0] == "@_exported" {
                            imports[name, default: []].insert(String(words[i + 1]))
                        }
                    }
                }
            }
            var above: Set<String> = [module]
            var grew = true
            while grew {
                grew = false
                for (name, used) in imports where !above.contains(name) && !used.isDisjoint(with: above) {
                    above.insert(name)
                    grew = true
                }
            }
            above.remove(module)
            return above.sorted()
        }

        /// Copies of ChorusEvents and ChorusProjections with `probe`
        /// declared and `steps` done.
        func variant(_ name: String, probe: Declaration, steps: [Step]) throws -> Variant {
            let dir = scratch.appendingPathComponent(name)
            var copies: [String: [String]] = [:]
            for module in ["ChorusEvents", "ChorusProjections"] {
                let target = dir.appendingPathComponent(module)
                try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
                for file in sources(of: module) {
                    var text = try String(contentsOfFile: file, encoding: .utf8)
                    let base = URL(fileURLWithPath: file).lastPathComponent
                    if module == probe.module && base == probe.file {
                        guard let at = text.range(of: probe.anchor) else { throw TestFailure("\(base) has no `\(probe.anchor)` to declare the probe after") }
                        text.replaceSubrange(at, with: probe.anchor + probe.declaration)
                    }
                    for step in steps where step.module == module && step.file == base {
                        text = try Self.adding(step.arm, toSwitchIn: step.member, of: text, file: base)
                    }
                    let copy = target.appendingPathComponent(base).path
                    try text.write(toFile: copy, atomically: true, encoding: .utf8)
                    copies[module, default: []].append(copy)
                }
            }
            return Variant(events: copies["ChorusEvents"] ?? [], projections: copies["ChorusProjections"] ?? [])
        }

        /// `text` with `arm` as the first case of the first `switch` in the
        /// body of `member`.
        static func adding(_ arm: String, toSwitchIn member: String, of text: String, file: String) throws -> String {
            guard let declared = text.range(of: #"(var|func) \#(member)\b"#, options: .regularExpression),
                let open = text.range(of: "switch ", range: declared.upperBound..<text.endIndex),
                let brace = text.range(of: "{\n", range: open.upperBound..<text.endIndex)
            else { throw TestFailure("\(file) has no switch in `\(member)`: the step moved; update ProbeKindTests and Specs/adding-a-kind.md") }
            var out = text
            out.insert(contentsOf: "        \(arm)\n", at: brace.upperBound)
            return out
        }

        func flags(_ module: String, sources: [String]) -> [String] {
            var flags = ["-swift-version", "6", "-module-name", module, "-package-name", packageName]
            if !sources.contains(where: { $0.hasSuffix("/main.swift") }) { flags.append("-parse-as-library") }
            flags += ["-I", scratch.appendingPathComponent("modules").path, "-I", modules.path]
            flags += ["-module-cache-path", scratch.appendingPathComponent("cache").path]
            flags += moduleMaps.flatMap { ["-Xcc", "-fmodule-map-file=\($0)"] }
            if service { flags += ["-D", "Service"] }
            return flags
        }

        func typecheck(_ module: String, sources: [String]) async throws -> CommandResult {
            try await runCommand(swiftc, ["-typecheck", "-continue-building-after-errors"] + flags(module, sources: sources) + sources)
        }

        func emitModule(_ module: String, sources: [String]) async throws {
            let path = scratch.appendingPathComponent("modules/\(module).swiftmodule").path
            let result = try await runCommand(swiftc, ["-emit-module", "-emit-module-path", path] + flags(module, sources: sources) + sources)
            guard result.status == 0 else { throw TestFailure("\(module) with the probe kind does not compile:\n\(result.stderr.prefix(3000))") }
        }

        /// The exhaustiveness errors of type-checking `module` from `sources`
        /// (nothing else may fail).
        func exhaustivenessErrors(module: String, sources: [String]) async throws -> [Exhaustiveness] {
            let result = try await typecheck(module, sources: sources)
            var found: [Exhaustiveness] = []
            var texts: [String: [Substring]] = [:]
            for line in result.stderr.split(separator: "\n") where line.hasPrefix("/") && line.contains(": error: ") {
                // /path/File.swift:LINE:COL: error: message
                let parts = line.split(separator: ":", maxSplits: 4)
                guard parts.count == 5, let number = Int(parts[1]) else { continue }
                guard parts[4].contains("switch must be exhaustive") else {
                    throw TestFailure("\(module) failed for another reason than a missing case:\n\(result.stderr.prefix(3000))")
                }
                let path = String(parts[0])
                if texts[path] == nil { texts[path] = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false) }
                found.append(Exhaustiveness(file: URL(fileURLWithPath: path).lastPathComponent, member: Self.member(enclosing: number, in: texts[path] ?? [])))
            }
            return found
        }

        /// The name of the nearest `var` or `func` declared at or above line `number` (1-based).
        static func member(enclosing number: Int, in lines: [Substring]) -> String {
            for line in lines[..<min(number, lines.count)].reversed() {
                for keyword in ["var ", "func "] {
                    if let at = line.range(of: keyword) {
                        return String(line[at.upperBound...].prefix { $0.isLetter || $0.isNumber || $0 == "_" })
                    }
                }
            }
            return "?"
        }
    }
}
