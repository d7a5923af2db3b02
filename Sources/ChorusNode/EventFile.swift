import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import Foundation

/// Files of whole events, as written by `chorus export` and read by
/// `chorus import` (Specs/events.md §8).
package enum EventFileFormat: String, Sendable, CaseIterable {
    /// A CBOR sequence (RFC 8742) of envelopes exactly as stored.
    case cbor
    /// One JSON object per line, as `chorus log --json` prints an event,
    /// plus `raw`: the envelope in hex, which is what import reads.
    case jsonl
}

/// The envelopes read from a whole event file by ``EventFile/read(_:)``, and
/// where reading stopped if the file is damaged.
package struct EventFileContents: Sendable {
    /// The envelopes in file order, as raw bytes; they are not yet decoded or
    /// verified (pass them to `Node.ingestAllOrNothing`).
    package var envelopes: [[UInt8]]
    /// Set when the file stops being readable: the index of the first
    /// unreadable event and why. Events before it were read.
    package var unreadable: (index: Int, reason: String)?
}

/// Writing and reading event files held in memory (Specs/events.md §8);
/// ``EventFileReader`` reads large files in bounded memory.
package enum EventFile {
    /// Appends one event in `format` to `out`.
    package static func append(_ stored: StoredEvent, format: EventFileFormat, to out: inout [UInt8]) {
        switch format {
        case .cbor: out.append(contentsOf: stored.event.encoded())
        case .jsonl:
            out.append(contentsOf: Array(stored.json(includeRaw: true).rendered().utf8))
            out.append(UInt8(ascii: "\n"))
        }
    }

    /// Space, tab, LF or CR: skipped before the first byte that tells the
    /// format (Specs/events.md §8.3).
    package static func isBlank(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0a || byte == 0x0d || byte == 0x09 }

    /// Splits a file into envelopes. The format is recognised from the first
    /// byte: `{` starts JSON lines, anything else is a CBOR sequence.
    package static func read(_ data: [UInt8]) -> EventFileContents {
        let first = data.first(where: { !isBlank($0) })
        return first == UInt8(ascii: "{") ? readJSONLines(data) : readCBORSequence(data)
    }

    static func readCBORSequence(_ data: [UInt8]) -> EventFileContents {
        var decoder = CBORDecoder(data)
        var envelopes: [[UInt8]] = []
        while !decoder.isAtEnd {
            do {
                let (_, range) = try decoder.nextItemBytes()
                envelopes.append(Array(data[range]))
            } catch {
                // Without a readable item boundary the rest of the sequence cannot be found.
                return EventFileContents(
                    envelopes: envelopes,
                    unreadable: (envelopes.count, "event \(envelopes.count) cannot be read, \(error); the rest of the file is unreadable"))
            }
        }
        return EventFileContents(envelopes: envelopes, unreadable: nil)
    }

    static func readJSONLines(_ data: [UInt8]) -> EventFileContents {
        var envelopes: [[UInt8]] = []
        for (lineNumber, line) in data.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
            if line.allSatisfy({ $0 == 0x20 || $0 == 0x0d || $0 == 0x09 }) { continue }
            guard let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any],
                let raw = object["raw"] as? String, let bytes = Hex.decode(raw)
            else {
                return EventFileContents(
                    envelopes: envelopes,
                    unreadable: (envelopes.count, "line \(lineNumber + 1) is not a JSON object with a hex \"raw\" envelope"))
            }
            envelopes.append(bytes)
        }
        return EventFileContents(envelopes: envelopes, unreadable: nil)
    }
}

/// Reads an event file in slices with bounded memory (Specs/events.md §8):
/// at most one buffered megabyte plus the envelopes of one slice.
package final class EventFileReader {
    private let handle: FileHandle
    private var buffer: [UInt8] = []
    private var start = 0
    private var atEOF = false
    private var format: EventFileFormat? = nil
    private var lineNumber = 0
    /// Envelopes handed out so far.
    package private(set) var count = 0
    /// Set once the file stops being readable (the index of the first
    /// unreadable event and why); nothing after it is returned.
    package private(set) var unreadable: (index: Int, reason: String)? = nil

    static let chunkBytes = 1 << 20
    /// The largest item read whole (Specs/events.md §8.1): an item that
    /// decodes is an event, refused as `envelope_too_large` when it is over
    /// the largest envelope (§3.4); a longer one, or a longer line of hex,
    /// means the file is not an event file, and reading stops there, so
    /// memory stays bounded whatever the file holds.
    static let maxItemBytes = 1 << 20

    /// Reads from `handle`, starting at its current offset; the format is
    /// recognised from the first non-blank byte.
    package init(handle: FileHandle) { self.handle = handle }

    /// The next envelopes, at most `limit`; empty at the end of the file or
    /// once it became unreadable.
    package func next(limit: Int) throws -> [[UInt8]] {
        var out: [[UInt8]] = []
        while out.count < limit, unreadable == nil {
            guard let envelope = try nextEnvelope() else { break }
            out.append(envelope)
            count += 1
        }
        return out
    }

    private func fill() throws -> Bool {
        guard !atEOF else { return false }
        if start > Self.chunkBytes {
            buffer.removeFirst(start)
            start = 0
        }
        let data = try handle.read(upToCount: Self.chunkBytes) ?? Data()
        if data.isEmpty {
            atEOF = true
            return false
        }
        buffer.append(contentsOf: data)
        return true
    }

    private func nextEnvelope() throws -> [UInt8]? {
        if format == nil {
            while true {
                if let first = buffer[start...].first(where: { !EventFile.isBlank($0) }) {
                    format = first == UInt8(ascii: "{") ? .jsonl : .cbor
                    break
                }
                if try !fill() { return nil }
            }
        }
        return format == .jsonl ? try nextLine() : try nextItem()
    }

    private func nextItem() throws -> [UInt8]? {
        while true {
            if start == buffer.count, try !fill() { return nil }
            var decoder = CBORDecoder(buffer, offset: start)
            do {
                let (_, range) = try decoder.nextItemBytes()
                guard range.count <= Self.maxItemBytes else {
                    unreadable = (count, "item \(count) is \(range.count) bytes, over 1 MiB: not an event file; the rest of the file is unreadable")
                    return nil
                }
                start = range.upperBound
                return Array(buffer[range])
            } catch {
                // The item runs past what is buffered: read on, up to the
                // largest an event can be.
                let needsMore: Bool
                switch error {
                case .truncated, .lengthBeyondInput: needsMore = true
                default: needsMore = false
                }
                if needsMore, buffer.count - start <= Self.maxItemBytes, try fill() { continue }
                // Without a readable item boundary the rest of the sequence cannot be found.
                unreadable = (count, "event \(count) cannot be read, \(error); the rest of the file is unreadable")
                return nil
            }
        }
    }

    private func nextLine() throws -> [UInt8]? {
        while true {
            if let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) ?? (atEOF && start < buffer.count ? buffer.count : nil) {
                let line = buffer[start..<newline]
                start = min(buffer.count, newline + 1)
                lineNumber += 1
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x0d || $0 == 0x09 }) { continue }
                guard let object = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any],
                    let raw = object["raw"] as? String, let bytes = Hex.decode(raw)
                else {
                    unreadable = (count, "line \(lineNumber) is not a JSON object with a hex \"raw\" envelope")
                    return nil
                }
                return bytes
            }
            if buffer.count - start > 3 * Self.maxItemBytes {
                unreadable = (count, "line \(lineNumber + 1) is over 3 MiB: not an event file; the rest of the file is unreadable")
                return nil
            }
            if try !fill() {
                if start >= buffer.count { return nil }
            }
        }
    }
}
