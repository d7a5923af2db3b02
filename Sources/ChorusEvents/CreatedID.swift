import ChorusCrypto

/// The id of an object a creation names (a picture, a chat) is bound to the
/// key that signs its creation (Specs/events.md §6.4): its first 16 bytes
/// are chosen freely, its last 16 are the first 16 bytes of
/// BLAKE2b-256("chorus/created-id/v1" ‖ 0x00 ‖ author ‖ first 16 bytes).
/// Only the creations of the key an id is bound to count, so no one can take
/// someone else's picture or chat over by signing a creation of its id with
/// an earlier HLC (the first creation in merge order wins).
package enum CreatedID {
    /// Bytes of the freely chosen part.
    package static let nonceBytes = 16

    private static let domain = Array("chorus/created-id/v1".utf8) + [0]

    /// The id `author` creates with this 16-byte `nonce`.
    package static func make(author: PublicKey, nonce: [UInt8]) -> ObjectID {
        precondition(nonce.count == nonceBytes, "a created id's nonce is \(nonceBytes) bytes")
        let tag = Blake2b.hash256(parts: [domain, author.bytes, nonce]).bytes.prefix(nonceBytes)
        guard let id = ObjectID(nonce + tag) else { preconditionFailure("16 + 16 bytes make an id") }
        return id
    }

    /// A new id for `author` to create, from a random nonce.
    package static func random(author: PublicKey) -> ObjectID { make(author: author, nonce: Random.bytes(nonceBytes)) }

    /// Whether `id` is one that `author` may create.
    package static func isBound(_ id: ObjectID, to author: PublicKey) -> Bool {
        make(author: author, nonce: Array(id.bytes.prefix(nonceBytes))) == id
    }

    /// Whether `id` is bound to the key of one of these creations of it: then
    /// only that key's creations count. An id bound to none is one made
    /// before ids were bound, where the first creation still counts
    /// (Specs/events.md §6.4).
    package static func isBoundToACreation<S: Sequence>(_ id: ObjectID, _ creators: S) -> Bool where S.Element == PublicKey {
        creators.contains { isBound(id, to: $0) }
    }
}
