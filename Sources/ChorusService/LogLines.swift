#if Service
import ChorusOperations
import Foundation
import Logging
import Synchronization

/// How `chorus serve` writes its log (Specs/api.md §8): one line per entry
/// on stderr, either text (`TIME LEVEL LABEL: message key=value …`) or one
/// JSON object per line for log collectors.
public struct LineLogHandler: LogHandler {
    public enum Format: String, Sendable, CaseIterable {
        case text, json
    }

    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level = .info
    let label: String
    let format: Format
    let write: @Sendable (String) -> Void

    public init(label: String, format: Format, level: Logger.Level = .info, write: @escaping @Sendable (String) -> Void = LineLogHandler.standardError) {
        self.label = label
        self.format = format
        self.logLevel = level
        self.write = write
    }

    /// Whole lines, never interleaved with another thread's.
    public static let standardError: @Sendable (String) -> Void = { line in
        errorLock.withLock { _ in FileHandle.standardError.write(Data((line + "\n").utf8)) }
    }
    private static let errorLock = Mutex(())

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var all = metadata
        if let provided = metadataProvider?.get() { all.merge(provided) { $1 } }
        if let extra = event.metadata { all.merge(extra) { $1 } }
        write(Self.line(time: Date(), level: event.level, label: label, message: "\(event.message)", metadata: all, format: format))
    }

    static let timeFormat = Date.ISO8601FormatStyle(includingFractionalSeconds: true)

    /// One entry as a line: `message` and metadata values are escaped so a
    /// line never breaks, whatever a peer sent.
    public static func line(time: Date, level: Logger.Level, label: String, message: String, metadata: Logger.Metadata, format: Format) -> String {
        let stamp = time.formatted(timeFormat)
        switch format {
        case .text:
            var out = "\(stamp) \(level) \(label): \(escaped(message))"
            for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
                let text = escaped("\(value)")
                out += " \(key)=" + (text.contains(" ") || text.isEmpty ? "\"\(text.replacingOccurrences(of: "\"", with: "\\\""))\"" : text)
            }
            return out
        case .json:
            var object: [String: String] = ["time": stamp, "level": "\(level)", "label": label, "message": message]
            for (key, value) in metadata where object[key] == nil { object[key] = "\(value)" }
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data()
            return String(decoding: data, as: UTF8.self)
        }
    }

    /// Control characters shown escaped (a peer's text cannot break a line or drive a terminal).
    static func escaped(_ s: String) -> String { terminalSafe(s) }
}
#endif
