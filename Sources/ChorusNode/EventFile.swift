import ChorusCBOR
import ChorusCrypto
import ChorusEvents
import ChorusLog
import Foundation

/// Files of whole events, as written by `chorus export` and read by
/// `chorus import` (Specs/events.md §8).
public enum EventFileFormat: String, Sendable, CaseIterable {
    /// A CBOR sequence (RFC 8742) of envelopes exactly as stored.
    case cbor
    /// One JSON object per line, as `chorus log --json` prints an event,
    /// plus `raw`: the envelope in hex, which is what import reads.
    case jsonl
}

public struct EventFileContents: Sendable {
    public var envelopes: [[UInt8]]
    /// Set when the file stops being readable: the index of the first
    /// unreadable event and why. Events before it were read.
    public var unreadable: (index: Int, reason: String)?
}

public enum EventFile {
    /// Appends one event in `format` to `out`.
    public static func append(_ stored: StoredEvent, format: EventFileFormat, to out: inout [UInt8]) {
        switch format {
        case .cbor: out.append(contentsOf: stored.event.encoded())
        case .jsonl:
            out.append(contentsOf: Array(stored.json(includeRaw: true).rendered().utf8))
            out.append(UInt8(ascii: "\n"))
        }
    }

    /// Splits a file into envelopes. The format is recognised from the first
    /// byte: `{` starts JSON lines, anything else is a CBOR sequence.
    public static func read(_ data: [UInt8]) -> EventFileContents {
        let first = data.first(where: { !($0 == 0x20 || $0 == 0x0a || $0 == 0x0d || $0 == 0x09) })
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
