// chorus-bench crypto: the cost of chat encryption (Specs/encryption.md)
// against the signature every event already pays, measured in the same run.
import ArgumentParser
import ChorusCBOR
import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusNode
import Foundation

struct CryptoOptions: ParsableArguments {
    @Option(help: "Seconds per measurement.") var seconds = 2.0
    @Option(help: "Bytes of message text.") var textBytes = 120
    @Option(help: "Member devices a rotation wraps the new key to.") var devices = 8
    @Flag(help: "Print machine-readable JSON.") var json = false

    func validate() throws {
        if seconds <= 0 { throw ValidationError("--seconds must be positive") }
        if !(1...PayloadLimits.messageTextBytes).contains(textBytes) {
            throw ValidationError("--text-bytes must be 1...\(PayloadLimits.messageTextBytes)")
        }
        if !(1...PayloadLimits.maxWraps).contains(devices) { throw ValidationError("--devices must be 1...\(PayloadLimits.maxWraps)") }
    }
}

struct CryptoBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "crypto",
        abstract: "Chat encryption's cost per message as a ratio to the Ed25519 signature of its event.",
        discussion: """
            On one core: raw Ed25519 sign and verify of a 200-byte header, then sealing a message body \
            (plaintext CBOR + XChaCha20-Poly1305 under the epoch key, fresh nonce) and opening it \
            (decrypt + decode), each as a cost ratio to one signature (target: each ≤ 0.10), with the \
            raw AEAD, CBOR and nonce costs they are made of. \
            Also the per-epoch costs a device pays once: unwrapping an epoch key (X25519 + AEAD + \
            epoch id check) and wrapping a new key to N member devices.
            """)
    @OptionGroup var options: CryptoOptions
    func run() async throws { runCryptoBenchmark(options) }
}

func runCryptoBenchmark(_ options: CryptoOptions) {
    let header = [UInt8](repeating: 0x42, count: 200)
    let key = SigningKey.generate()
    let signature = key.sign(header)
    let chat = Random.bytes32(), author = key.publicKey
    let epochKey = Random.bytes(32)
    let epoch = ChatCrypto.epochID(chat: chat, key: epochKey)
    let text = String(repeating: "a", count: options.textBytes)
    let plaintext = MessageContent(text: text).encoded()
    let sealed = ChatCrypto.seal(
        plaintext, epochKey: epochKey, epoch: epoch, kind: .messageSent, chat: chat, object: chat,
        author: author)
    let recipients = (0..<options.devices).map { _ in
        ChatCrypto.Recipient(device: Random.bytes32(), encryptionKey: AgreementKey.generate().publicKey)
    }
    let me = AgreementKey.generate()
    let myDevice = Random.bytes32()
    let ephemeral = AgreementKey.generate()
    guard let wraps = ChatCrypto.wrap(
        epochKey: epochKey, chat: chat, epoch: epoch,
        to: recipients + [ChatCrypto.Recipient(device: myDevice, encryptionKey: me.publicKey)], ephemeral: ephemeral)
    else { fatalError("wrapping to freshly generated keys failed") }
    let s = options.seconds

    Bench.note("raw Ed25519 sign and verify, 1 core...")
    let sign = rate(threads: 1, seconds: s) { _ in _ = key.sign(header) }
    let verify = rate(threads: 1, seconds: s) { _ in _ = Ed25519.verify(signature: signature, message: header, publicKey: author) }
    Bench.note("raw XChaCha20-Poly1305 and the message's CBOR...")
    let nonce = Random.bytes(24), ad = [UInt8](repeating: 7, count: 120)
    let rawSeal = rate(threads: 1, seconds: s) { _ in _ = XChaCha20Poly1305.seal(key: epochKey, nonce: nonce, ad: ad, message: plaintext) }
    let encode = rate(threads: 1, seconds: s) { _ in _ = MessageContent(text: text).encoded() }
    let decode = rate(threads: 1, seconds: s) { _ in _ = MessageContent.decode(plaintext) }
    let randomBytes = rate(threads: 1, seconds: s) { _ in _ = Random.bytes(24) }
    let randomNonce = rate(threads: 1, seconds: s) { _ in _ = Random.nonce(24) }
    Bench.note("seal and open a message body...")
    let seal = rate(threads: 1, seconds: s) { _ in
        _ = ChatCrypto.seal(
            MessageContent(text: text).encoded(), epochKey: epochKey, epoch: epoch, kind: .messageSent,
            chat: chat, object: chat, author: author)
    }
    let open = rate(threads: 1, seconds: s) { _ in
        guard let p = ChatCrypto.open(sealed, epochKey: epochKey, kind: .messageSent, chat: chat, object: chat, author: author),
            MessageContent.decode(p) != nil
        else { fatalError("a sealed body did not open") }
    }
    Bench.note("unwrap an epoch key, wrap one to \(options.devices) devices...")
    let unwrap = rate(threads: 1, seconds: s, batch: 8) { _ in
        guard ChatCrypto.unwrap(wraps: wraps, ephemeral: ephemeral.publicKey, chat: chat, epoch: epoch, device: myDevice, with: me) != nil
        else { fatalError("unwrap failed") }
    }
    let wrap = rate(threads: 1, seconds: s, batch: 1) { _ in
        _ = ChatCrypto.wrap(epochKey: epochKey, chat: chat, epoch: epoch, to: recipients, ephemeral: AgreementKey.generate())
    }
    let messageCost = sign / seal + sign / open  // in signatures

    let rows: [(String, Double, String)] = [
        ("Ed25519 sign, 1 core (limit)", sign, ""),
        ("Ed25519 verify, 1 core", verify, ""),
        ("raw XChaCha20-Poly1305 seal, \(plaintext.count) bytes", rawSeal, String(format: "%.3f of a signature", sign / rawSeal)),
        ("CBOR encode of the plaintext", encode, String(format: "%.3f of a signature", sign / encode)),
        ("CBOR decode of the plaintext", decode, String(format: "%.3f of a signature", sign / decode)),
        ("24 random bytes, one system call", randomBytes, String(format: "%.3f of a signature", sign / randomBytes)),
        ("a 24-byte nonce (the pool sealing uses)", randomNonce, String(format: "%.3f of a signature", sign / randomNonce)),
        ("seal a \(options.textBytes)-byte message", seal, String(format: "%.3f of a signature (target ≤ 0.10)", sign / seal)),
        ("open it (decrypt + decode)", open, String(format: "%.3f of a signature (target ≤ 0.10)", sign / open)),
        ("seal + open", 1 / (1 / seal + 1 / open), String(format: "%.3f of a signature", messageCost)),
        ("unwrap an epoch key (once per epoch)", unwrap, String(format: "%.2f of a verify", verify / unwrap)),
        ("wrap a new key to \(options.devices) devices (a rotation)", wrap, String(format: "%.2f of a signature", sign / wrap)),
    ]
    if options.json {
        print(JSONValue.array(rows.map { r in
            .object([("name", .string(r.0)), ("per_second", .uint(UInt64(r.1))), ("ratio", .string(r.2))])
        }).rendered())
        return
    }
    func pad(_ s: String, _ n: Int) -> String { s + String(repeating: " ", count: max(0, n - s.count)) }
    print(pad("measurement", 46) + pad("per second", 14) + "ratio")
    for r in rows { print(pad(r.0, 46) + pad(String(Int(r.1)), 14) + r.2) }
}
