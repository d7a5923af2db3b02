#if Service
import ChorusService
import ChorusTestSupport
import Foundation
import Testing

/// The API token is created owner-only (`OwnerOnlyFile`, whose own tests
/// are in ChorusStorageTests).
@Suite("owner-only files of the local API")
struct APITokenFileTests {
    @Test func theAPITokenIsMadeOnceOwnerOnlyAndThenRead() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let path = dir.path + "/keys/api.token"
        let token = try APIToken.loadOrCreate(at: path)
        #expect(token.count == 64)
        #expect(try fileMode(path) == 0o600)
        #expect(try fileMode(dir.path + "/keys") == 0o700)
        #expect(try APIToken.loadOrCreate(at: path) == token)
    }
}
#endif
