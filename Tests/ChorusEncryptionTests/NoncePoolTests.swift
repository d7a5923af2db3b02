@testable import ChorusCrypto
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The nonces sealing takes from `NoncePool` (a block of system randomness
/// handed out in order): never the same twice, across threads and blocks,
/// and not again in a forked child.
@Suite(.serialized) struct NoncePoolTests {
    @Test func noncesFromManyThreadsAndBlocksAreDistinct() async {
        // 8 tasks x 2,000 nonces: about 94 blocks, each refetched while
        // other threads wait on the lock.
        let all = await withTaskGroup(of: [[UInt8]].self) { group in
            for _ in 0..<8 { group.addTask { (0..<2_000).map { _ in Random.nonce(24) } } }
            return await group.reduce(into: [[UInt8]]()) { $0 += $1 }
        }
        #expect(all.count == 16_000)
        #expect(Set(all).count == all.count)
        #expect(all.allSatisfy { $0.count == 24 && $0.contains { $0 != 0 } })
    }

    #if os(Linux)
    /// A child forked with part of a block unused fetches a new block
    /// instead of handing out the parent's next nonce (the `pthread_atfork`
    /// handler). The child writes its nonce to a pipe and exits; the parent
    /// bounds its wait.
    @Test func aForkedChildDoesNotReuseTheParentsBlock() throws {
        _ = Random.nonce(24)
        let parentNext = try #require(NoncePool.upcoming(24))
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let pid = fork()
        if pid == 0 {
            var nonce = [UInt8](repeating: 0, count: 24)
            nonce.withUnsafeMutableBytes { if let base = $0.baseAddress { NoncePool.fill(base, count: 24) } }
            _ = nonce.withUnsafeBytes { write(fds[1], $0.baseAddress, 24) }
            _exit(0)
        }
        #expect(pid > 0)
        close(fds[1])
        defer { close(fds[0]) }
        var status: Int32 = 0
        var exited = false
        for _ in 0..<1_000 {
            if waitpid(pid, &status, WNOHANG) == pid {
                exited = true
                break
            }
            usleep(10_000)
        }
        if !exited {
            kill(pid, SIGKILL)
            _ = waitpid(pid, &status, 0)
        }
        #expect(exited, "the forked child did not finish within 10 s")
        var childNonce = [UInt8](repeating: 0, count: 24)
        let read = childNonce.withUnsafeMutableBytes { Glibc.read(fds[0], $0.baseAddress, 24) }
        #expect(read == 24)
        #expect(childNonce != parentNext)
        #expect(childNonce.contains { $0 != 0 })
    }
    #endif
}
