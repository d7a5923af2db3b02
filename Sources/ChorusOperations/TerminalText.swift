/// Text from the network made safe for a terminal: control characters (ESC,
/// BEL, C1 controls, …) are shown escaped, so stored text can neither move
/// the cursor, clear the screen nor retitle the terminal.
public func terminalSafe(_ s: String, keepingNewlines: Bool = false) -> String {
    var out = ""
    out.unicodeScalars.reserveCapacity(s.unicodeScalars.count)
    for u in s.unicodeScalars {
        if keepingNewlines, u == "\n" {
            out.unicodeScalars.append(u)
        } else if u.value < 0x20 || (0x7F...0x9F).contains(u.value) {
            out += u == "\n" ? "\\n" : u == "\t" ? "\\t" : "\\u{\(String(u.value, radix: 16))}"
        } else {
            out.unicodeScalars.append(u)
        }
    }
    return out
}
