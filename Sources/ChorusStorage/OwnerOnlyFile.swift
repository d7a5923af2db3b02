import Foundation

/// New files only their owner may read (Specs/storage.md §1), created with
/// that mode. `FileManager.createFile(atPath:contents:attributes:)` writes
/// the file with the default mode (0644 under the usual umask) and narrows
/// it afterwards: for that moment anyone may open it, and whoever did keeps
/// reading what is written after. In a shared temporary directory that is
/// a request body or a piped message in plain text. The store's secrets
/// (its keys, the network configuration) are written through it too, with
/// `durable`.
public enum OwnerOnlyFile {
    /// Creates `path`, which must not exist, with mode 0600 and opens it
    /// for writing.
    public static func create(_ path: String) throws(OwnerOnlyFileError) -> FileHandle {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            let code = errno
            throw code == EEXIST ? .exists(path) : .cannotCreate(path, String(cString: strerror(code)))
        }
        return FileHandle(fileDescriptor: fd, closeOnDealloc: true)
    }

    /// Creates `path`, which must not exist, with mode 0600 and writes
    /// `contents` to it; with `durable`, on the disk (`fsync`) before it
    /// returns (a key the store is about to use). The file is written beside
    /// `path` and linked there whole, so a reader racing the writer (two
    /// syncs of one store creating its key at once) never sees it half
    /// written; `.exists` when another writer linked its file first.
    public static func write(
        _ contents: some DataProtocol, to path: String, durable: Bool = false
    ) throws(OwnerOnlyFileError) {
        let partial = path + ".partial-" + UUID().uuidString
        let handle = try create(partial)
        defer { unlink(partial) }
        do {
            try handle.write(contentsOf: contents)
            if durable { try handle.synchronize() }
            try handle.close()
        } catch {
            throw .cannotCreate(path, error.localizedDescription)
        }
        guard link(partial, path) == 0 else {
            let code = errno
            throw code == EEXIST ? .exists(path) : .cannotCreate(path, String(cString: strerror(code)))
        }
    }

    /// Writes `contents` to `path` with mode 0600, replacing whatever file
    /// is there: written beside it first (on the disk first, with
    /// `durable`), then renamed over it, so the path never holds a
    /// half-written file (output the user named, such as a decrypted
    /// attachment; a configuration rewritten).
    public static func replace(
        _ path: String, with contents: some DataProtocol, durable: Bool = false
    ) throws(OwnerOnlyFileError) {
        do { try replace(path, durable: durable) { try $0.write(contentsOf: contents) } } catch let error as OwnerOnlyFileError {
            throw error
        } catch {
            throw .cannotCreate(path, error.localizedDescription)
        }
    }

    /// `replace(_:with:durable:)` for contents written a piece at a time
    /// (an export of a whole store, in bounded memory): `write` writes them
    /// to the file beside `path`, which is renamed over `path` once it
    /// returns. If it throws, the file beside is removed and `path` left as
    /// it was; its error is rethrown.
    public static func replace(_ path: String, durable: Bool = false, writing write: (FileHandle) throws -> Void) throws {
        let partial = path + ".partial-" + UUID().uuidString
        let handle = try create(partial)
        do {
            try write(handle)
            try finish(handle, partial, path, durable: durable)
        } catch {
            try? FileManager.default.removeItem(atPath: partial)
            throw error
        }
    }

    /// `replace(_:durable:writing:)` with pieces that come asynchronously.
    public static func replace(_ path: String, durable: Bool = false, writingPieces write: (FileHandle) async throws -> Void) async throws {
        let partial = path + ".partial-" + UUID().uuidString
        let handle = try create(partial)
        do {
            try await write(handle)
            try finish(handle, partial, path, durable: durable)
        } catch {
            try? FileManager.default.removeItem(atPath: partial)
            throw error
        }
    }

    /// Makes the written file durable when asked, closes it and renames it over `path`.
    private static func finish(_ handle: FileHandle, _ partial: String, _ path: String, durable: Bool) throws {
        if durable { try handle.synchronize() }
        try handle.close()
        guard rename(partial, path) == 0 else { throw OwnerOnlyFileError.cannotCreate(path, String(cString: strerror(errno))) }
    }
}

/// Why `OwnerOnlyFile` could not create a file.
public enum OwnerOnlyFileError: Error, Equatable, CustomStringConvertible {
    /// The file already exists: it is never overwritten (another process
    /// may have made it, with a mode of its own).
    case exists(String)
    /// The file could not be created or written, with the system's reason.
    case cannotCreate(String, String)

    public var description: String {
        switch self {
        case .exists(let path): "\(path) already exists"
        case .cannotCreate(let path, let reason): "cannot write \(path): \(reason)"
        }
    }
}
