// A child process for the crash test (Tests/ChorusNodeTests/CrashTests.swift):
// appends events from several concurrent tasks, forever, and prints
// "ack SEQ ID" on stdout each time an append has returned (that is, is
// durable). The test kills it with SIGKILL and checks every ack survived.
// Usage: chorus-crash-writer STORE TASKS
import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusNode
import ChorusProjections
import Foundation

let args = CommandLine.arguments
guard args.count == 3, let tasks = Int(args[2]), tasks > 0 else {
    FileHandle.standardError.write(Data("usage: chorus-crash-writer STORE TASKS\n".utf8))
    exit(2)
}
let store = args[1]

let node: Node
do {
    var options = NodeOptions()
    options.initialMapSize = 1 << 20  // small, so the crash test also crosses map growth
    if FileManager.default.fileExists(atPath: store + "/keys/device.secret") {
        node = try await Node.open(at: store, options: options)
    } else {
        node = try await Node.create(at: store, deviceName: "crash-writer", network: NetworkConfig(), options: options)
    }
} catch {
    FileHandle.standardError.write(Data("cannot open \(store): \(error)\n".utf8))
    exit(2)
}
/// One write(2) per line: unbuffered, and atomic on a pipe for lines this short.
func emit(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
emit("ready")

await withTaskGroup(of: Void.self) { group in
    for task in 0..<tasks {
        group.addTask {
            var n = 0
            while true {
                n += 1
                do {
                    let event = try await node.append(
                        .profileSet, object: node.identity.user.raw,
                        payload: .textMap([("field", .text("bio")), ("value", .text("task \(task) edit \(n) " + String(repeating: "x", count: 200)))]))
                    emit("ack \(event.seq) \(event.id.hex)")
                } catch {
                    FileHandle.standardError.write(Data("append failed: \(error)\n".utf8))
                    exit(1)
                }
            }
        }
    }
}
