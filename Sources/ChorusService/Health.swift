#if Service
import ChorusNode
import ChorusOperations
import Foundation

/// What `GET /health` answers (Specs/api.md §8): whether the store reads
/// and the writer commits. 200 when both do (a read-only node's writer is
/// `read_only`), else 503; the body says which part fails.
enum Health {
    /// How long the writer may take to run an empty job before it counts as stalled.
    static let writerLimit = Duration.seconds(5)

    static func check(_ node: Node) async -> (ok: Bool, body: JSONValue) {
        let store: String
        do {
            _ = try node.lastArrival()
            store = "ok"
        } catch {
            store = OperationError(error).code
        }
        let writer = await probe(node)
        let ok = store == "ok" && (writer == "ok" || writer == "read_only")
        return (ok, .object([("status", .string(ok ? "ok" : "failing")), ("store", .string(store)), ("writer", .string(writer))]))
    }

    /// `ok`, `read_only`, `closed`, `stalled` (no answer within `writerLimit`), or the error's code.
    static func probe(_ node: Node) async -> String {
        await withTaskGroup(of: String.self) { group in
            group.addTask {
                do {
                    try await node.probeWriter()
                    return "ok"
                } catch NodeError.readOnly {
                    return "read_only"
                } catch {
                    return OperationError(error).code
                }
            }
            group.addTask {
                try? await Task.sleep(for: writerLimit)
                return "stalled"
            }
            let first = await group.next() ?? "stalled"
            group.cancelAll()
            return first
        }
    }
}

/// The process's own figures for `/metrics`, read from `/proc` at each
/// scrape (Linux; elsewhere none): resident memory, CPU seconds, open descriptors.
enum ProcessFigures {
    static func read() -> (residentBytes: Double, cpuSeconds: Double, openDescriptors: Double)? {
        #if os(Linux)
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
            let stat = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8)
        else { return nil }
        let page = Double(sysconf(Int32(_SC_PAGESIZE)))
        let resident = statm.split(separator: " ").dropFirst().first.flatMap { Double($0) } ?? 0
        // The fields after the command name (which may hold spaces), from `state`: utime and stime are the 12th and 13th.
        let after = stat.split(separator: ")").last?.split(separator: " ") ?? []
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let cpu = after.count > 12 ? ((Double(after[11]) ?? 0) + (Double(after[12]) ?? 0)) / max(1, ticks) : 0
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
        return (resident * page, cpu, Double(descriptors))
        #else
        return nil
        #endif
    }
}
#endif
