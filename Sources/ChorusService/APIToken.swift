import ChorusCrypto
import ChorusStorage
import Foundation

/// The bearer token of the local API over TCP (Specs/api.md §3): 32 random
/// bytes as 64 hex digits in `keys/api.token`, owner-only like the keys.
public enum APIToken {
    /// The token in the file at `path`; made, owner-only, when there is none.
    public static func loadOrCreate(at path: String) throws -> String {
        if let token = try load(path) { return token }
        let token = fresh()
        let directory = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        do { try OwnerOnlyFile.write(Data((token + "\n").utf8), to: path) } catch .exists {
            // Another process made it first: theirs.
            guard let theirs = try load(path) else { throw APITokenError.cannotWrite(path) }
            return theirs
        } catch {
            throw APITokenError.cannotWrite(path)
        }
        return token
    }

    /// Replaces the token at `path` with a new one and returns it. A
    /// running server reads the file again on its next request: the old
    /// token and every page session made with it stop working at once.
    public static func rotate(at path: String) throws -> String {
        let token = fresh()
        let directory = (path as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        do { try OwnerOnlyFile.replace(path, with: Data((token + "\n").utf8), durable: true) } catch { throw APITokenError.cannotWrite(path) }
        return token
    }

    /// 32 random bytes as 64 lowercase hex digits.
    static func fresh() -> String { Hex.encode(Random.bytes(32)) }

    /// The token in the file at `path`, or nil when there is none to read.
    private static func load(_ path: String) throws -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let token = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard token.count >= 32 else { throw APITokenError.tooShort(path) }
        return token
    }
}

public enum APITokenError: Error, CustomStringConvertible {
    case tooShort(String)
    case cannotWrite(String)

    public var description: String {
        switch self {
        case .tooShort(let path): "the API token in \(path) is shorter than 32 characters: delete the file and a new token is made"
        case .cannotWrite(let path): "cannot write the API token to \(path)"
        }
    }
}
