import ChorusEvents
import ChorusNode
import ChorusProjections
import ChorusStorage
import ChorusTestSupport
import Foundation
import Testing

@Suite("store compaction", .closingNodes)
struct CompactionTests {
    /// A store whose deleted pictures left free pages behind.
    static func storeWithFreePages(_ path: String) async throws -> (events: Int, digest: String, kept: [String]) {
        let node = opened(try await Node.create(at: path, network: NetworkConfig()))
        var random = SplitMix64(seed: 7)
        var pictures: [PictureID] = []
        for i in 0..<8 {
            let bytes = (0..<(1 << 20)).map { _ in UInt8.random(in: 0...255, using: &random) }
            pictures.append(try await node.addPicture(bytes, mime: "image/png", caption: "picture \(i)").object)
        }
        // Deleted last, so later writes cannot reuse their pages.
        for picture in pictures[0..<4] { _ = try await node.deletePicture(picture) }
        let kept = pictures[4...].map(\.description)
        _ = try await node.setProfile(.bio, .text("kept"))
        let result = (try node.log.eventCount(), try node.projections.digest().hex, kept.sorted())
        await node.close()
        return result
    }

    @Test func compactionGivesFreePagesBackAndKeepsEveryEventAndTheDigest() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let path = dir.store("a")
        let before = try await Self.storeWithFreePages(path)
        // A compaction cut short leaves this behind; the next one clears it.
        try FileManager.default.createDirectory(atPath: path + "/compacting", withIntermediateDirectories: false)
        try Data("partial".utf8).write(to: URL(fileURLWithPath: path + "/compacting/data.mdb"))

        let result = try await Node.compact(at: path)
        #expect(result.events == before.events && result.digest.hex == before.digest)
        // Four deleted pictures of 1 MiB: their blob pages were free.
        #expect(result.bytesAfter < result.bytesBefore - (3 << 20), "\(result.bytesBefore) → \(result.bytesAfter)")
        let attributes = try FileManager.default.attributesOfItem(atPath: path + "/data.mdb")
        #expect(attributes[.size] as? Int == result.bytesAfter)
        #expect(attributes[.posixPermissions] as? Int == 0o600)  // the owner's alone, as before
        #expect(!FileManager.default.fileExists(atPath: path + "/compacting"))

        // The compacted store opens, answers and takes new writes.
        let node = opened(try await Node.open(at: path))
        #expect(try node.projections.digest().hex == before.digest)
        #expect(try node.projections.pictures(of: node.identity.user).map(\.id.description).sorted() == before.kept)
        _ = try await node.setProfile(.bio, .text("after"))
        #expect(try node.log.integrityProblems().isEmpty)
        await node.close()
    }

    @Test func compactionRefusesWhileTheStoreIsOpen() async throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let path = dir.store("a")
        _ = try await Self.storeWithFreePages(path)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb"))

        // Open in this process.
        let node = opened(try await Node.open(at: path, readOnly: true))
        await #expect(throws: StorageError.alreadyOpenInProcess(path: path)) { _ = try await Node.compact(at: path) }
        await node.close()

        // Open in another process: LMDB's shared lock on lock.mdb's first byte, as any reader holds it.
        let holder = ChildProcess()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        holder.arguments = [
            "-c",
            // Held until its standard input closes (or 600 s pass).
            "import fcntl, signal, sys\nsignal.alarm(600)\nf = open(sys.argv[1], 'r+')\nfcntl.lockf(f, fcntl.LOCK_SH, 1, 0)\nprint('held', flush=True)\nsys.stdin.read()",
            path + "/lock.mdb",
        ]
        let out = Pipe()
        let input = Pipe()
        holder.standardOutput = out
        holder.standardInput = input
        try holder.run()
        defer { try? input.fileHandleForWriting.close() }
        let line = try await offThePool { out.fileHandleForReading.availableData }  // blocks until the lock is held
        #expect(String(decoding: line, as: UTF8.self).hasPrefix("held"))
        do {
            _ = try await Node.compact(at: path)
            Issue.record("compacted a store another process has open")
        } catch NodeError.storeOpenElsewhere(let where_, let pid) {
            #expect(where_ == path && pid == holder.processIdentifier)
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path + "/data.mdb")) == bytes)
        try input.fileHandleForWriting.close()
        #expect(await holder.exit(within: .seconds(120)), "the lock holder did not end once its input closed")

        // Once it has gone, `chorus compact` goes ahead.
        let compacted = try await runCommand(try productPath("chorus"), ["compact", "--store", path, "--json"])
        #expect(compacted.status == 0, "\(compacted.stderr)")
        let report = try #require(try JSONSerialization.jsonObject(with: Data(compacted.stdout.utf8)) as? [String: Any])
        let (before, after) = (report["bytes_before"] as? Int ?? 0, report["bytes_after"] as? Int ?? 0)
        #expect(after > 0 && after < before - (3 << 20), "\(compacted.stdout)")
    }
}
