import CFuzzDriver
import ChorusFuzzTargets
import Foundation

// Built two ways (Tools/fuzz). With `-sanitize=fuzzer -DFUZZING`, `main`
// hands libFuzzer the target named by CHORUS_FUZZ_TARGET, and libFuzzer runs
// it on the inputs it evolves. Built plainly, `chorus-fuzz` replays files
// through a target instead (a corpus, a crash reproducer).

/// The target libFuzzer drives, read once from the environment.
let fuzzedTarget: FuzzTarget = {
    let name = ProcessInfo.processInfo.environment["CHORUS_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTarget(rawValue: name) else {
        let names = FuzzTarget.allCases.map(\.rawValue).joined(separator: ", ")
        FileHandle.standardError.write(Data("chorus-fuzz: set CHORUS_FUZZ_TARGET to one of: \(names)\n".utf8))
        exit(2)
    }
    return target
}()

@main
struct ChorusFuzz {
    static func main() {
        #if FUZZING
        _ = fuzzedTarget
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        exit(LLVMFuzzerRunDriver(&argc, &argv) { start, count in
            fuzzedTarget.run(start.map { Array(UnsafeBufferPointer(start: $0, count: count)) } ?? [])
            return 0
        })
        #else
        replay()
        #endif
    }

    static func replay() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.count == 3, arguments[0] == "--seeds", let target = FuzzTarget(rawValue: arguments[1]) {
            writeSeeds(of: target, to: arguments[2])
            return
        }
        guard arguments.first != "--help", arguments.first != "-h", arguments.count >= 2,
            let target = FuzzTarget(rawValue: arguments[0])
        else {
            print(
                """
                usage: chorus-fuzz TARGET PATH...
                       chorus-fuzz --seeds TARGET DIRECTORY
                Runs every file under each PATH through TARGET (\(FuzzTarget.allCases.map(\.rawValue).joined(separator: ", "))):
                a trap is a defect. --seeds writes the target's seed inputs (from Specs/vectors) as files.
                Tools/fuzz builds it with libFuzzer to search for inputs that trap.
                """)
            exit(arguments.first == "--help" || arguments.first == "-h" ? 0 : 2)
        }
        var files: [String] = []
        for path in arguments.dropFirst() {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                FileHandle.standardError.write(Data("chorus-fuzz: no such file or directory: \(path)\n".utf8))
                exit(2)
            }
            if isDirectory.boolValue {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
                files += names.sorted().map { path + "/" + $0 }
            } else {
                files.append(path)
            }
        }
        for file in files {
            guard let data = FileManager.default.contents(atPath: file) else { continue }
            target.run(Array(data))
        }
        print("\(target.rawValue): \(files.count) inputs ran")
    }

    static func writeSeeds(of target: FuzzTarget, to directory: String) {
        let vectors = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../../Specs/vectors").standardized
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            let seeds = target.seeds(vectors: vectors)
            for (i, seed) in seeds.enumerated() {
                try Data(seed).write(to: URL(fileURLWithPath: directory).appendingPathComponent(String(format: "seed-%03d", i)))
            }
            print("\(target.rawValue): \(seeds.count) seeds in \(directory)")
        } catch {
            FileHandle.standardError.write(Data("chorus-fuzz: cannot write seeds to \(directory): \(error)\n".utf8))
            exit(1)
        }
    }
}
