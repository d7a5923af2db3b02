import ChorusStorage
import ChorusTestSupport
import Foundation
import Testing

/// Files that hold what others must not read (request bodies spooled for a
/// command, standard input piped to one, keys, the network configuration)
/// are created owner-only, with that mode from the start.
@Suite("owner-only files")
struct OwnerOnlyFileTests {
    @Test func aNewFileIsTheOwnersAloneAndAnExistingOneIsNeverOverwritten() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let path = dir.path + "/body"
        try OwnerOnlyFile.write(Data("the message, in plain text".utf8), to: path)
        #expect(try fileMode(path) == 0o600)
        #expect(FileManager.default.contents(atPath: path) == Data("the message, in plain text".utf8))
        #expect(throws: OwnerOnlyFileError.exists(path)) { try OwnerOnlyFile.write(Data("other".utf8), to: path) }
        #expect(FileManager.default.contents(atPath: path) == Data("the message, in plain text".utf8))

        let handle = try OwnerOnlyFile.create(dir.path + "/spool")
        #expect(try fileMode(dir.path + "/spool") == 0o600)  // before anything is written
        try handle.write(contentsOf: Data("piped".utf8))
        try handle.close()
        #expect(FileManager.default.contents(atPath: dir.path + "/spool") == Data("piped".utf8))

        #expect(throws: OwnerOnlyFileError.self) { try OwnerOnlyFile.write(Data(), to: dir.path + "/absent/file") }

        // Output the user names replaces what stood there, owner-only.
        let output = dir.path + "/picture.jpg"
        #expect(FileManager.default.createFile(atPath: output, contents: Data("old".utf8), attributes: [.posixPermissions: 0o644]))
        try OwnerOnlyFile.replace(output, with: Data("decrypted".utf8))
        #expect(FileManager.default.contents(atPath: output) == Data("decrypted".utf8))
        #expect(try fileMode(output) == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted() == ["body", "picture.jpg", "spool"])
    }

    @Test func aDurableWriteAndReplaceLeaveOnlyTheFileOwnerOnly() throws {
        let dir = TempDir()
        defer { dir.cleanup() }
        let key = dir.path + "/device.key"
        try OwnerOnlyFile.write(Array("00ff\n".utf8), to: key, durable: true)
        #expect(try fileMode(key) == 0o600)
        #expect(FileManager.default.contents(atPath: key) == Data("00ff\n".utf8))
        try OwnerOnlyFile.replace(key, with: Array("11ee\n".utf8), durable: true)
        #expect(FileManager.default.contents(atPath: key) == Data("11ee\n".utf8))
        #expect(try fileMode(key) == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path) == ["device.key"])
    }
}
