import ChorusCommandLine
import ChorusService
import ChorusTestSupport
import Foundation
import Testing

/// Files that hold what others must not read (request bodies spooled for a
/// command, standard input piped to one, the API token) are created owner-only.
@Suite("owner-only files")
struct OwnerOnlyFileTests {
    static func mode(_ path: String) throws -> Int? {
        try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
    }

    @Test func aNewFileIsTheOwnersAloneAndAnExistingOneIsNeverOverwritten() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let path = dir.path + "/body"
        try OwnerOnlyFile.write(Data("the message, in plain text".utf8), to: path)
        #expect(try Self.mode(path) == 0o600)
        #expect(FileManager.default.contents(atPath: path) == Data("the message, in plain text".utf8))
        #expect(throws: OwnerOnlyFileError.exists(path)) { try OwnerOnlyFile.write(Data("other".utf8), to: path) }
        #expect(FileManager.default.contents(atPath: path) == Data("the message, in plain text".utf8))

        let handle = try OwnerOnlyFile.create(dir.path + "/spool")
        #expect(try Self.mode(dir.path + "/spool") == 0o600)  // before anything is written
        try handle.write(contentsOf: Data("piped".utf8))
        try handle.close()
        #expect(FileManager.default.contents(atPath: dir.path + "/spool") == Data("piped".utf8))

        #expect(throws: OwnerOnlyFileError.self) { try OwnerOnlyFile.write(Data(), to: dir.path + "/absent/file") }

        // Output the user names replaces what stood there, owner-only.
        let output = dir.path + "/picture.jpg"
        #expect(FileManager.default.createFile(atPath: output, contents: Data("old".utf8), attributes: [.posixPermissions: 0o644]))
        try OwnerOnlyFile.replace(output, with: Data("decrypted".utf8))
        #expect(FileManager.default.contents(atPath: output) == Data("decrypted".utf8))
        #expect(try Self.mode(output) == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["body", "picture.jpg", "spool"])
    }

    @Test func theAPITokenIsMadeOnceOwnerOnlyAndThenRead() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let path = dir.path + "/keys/api.token"
        let token = try APIToken.loadOrCreate(at: path)
        #expect(token.count == 64)
        #expect(try Self.mode(path) == 0o600)
        #expect(try Self.mode(dir.path + "/keys") == 0o700)
        #expect(try APIToken.loadOrCreate(at: path) == token)
    }
}
