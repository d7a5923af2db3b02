import ChorusCBOR
import ChorusCrypto
import ChorusEncryption
import ChorusEvents
import ChorusProjections
import Foundation

/// Where `movePicture` puts a picture in its owner's gallery.
public enum GalleryPlacement: Sendable, Hashable {
    /// Before every other picture.
    case first
    /// After every other picture.
    case last
    /// Just before the given picture of the same gallery.
    case before(PictureID)
    /// Just after the given picture of the same gallery.
    case after(PictureID)
}

/// The typed mutations of the library API: each signs one event with this
/// device's key (or the user or issuer key where the rules require it) and
/// returns a `Mutation` once it and the projections it changed are durable:
/// the event, the object it targets (the new picture or chat for
/// `addPicture` and `createChat`) and whether it took effect. The
/// checks made here before signing only give clear errors early; the rules
/// themselves are applied by the projections, identically on every replica.
extension Node {
    /// A committed event and whether the rules let it take effect.
    func outcome<Object: TypedID>(_ event: Event, _ object: Object) throws -> Mutation<Object> {
        Mutation(event: event, object: object, effect: try projections.noEffect(of: event).map { .noEffect($0) } ?? .applied)
    }

    // MARK: Identity

    /// Binds a device to this node's user (user key required). `proof` is
    /// the device's signature from `DeviceBinding.proof(device:user:)`,
    /// printed by `chorus init --user` on the new device.
    @discardableResult
    public func addDevice(_ device: DeviceID, proof: [UInt8], name: String? = nil) async throws -> Mutation<DeviceID> {
        guard Ed25519.verify(signature: proof, message: DeviceBinding.proofMessage(user: identity.user.raw), publicKey: device.raw) else {
            throw NodeError.refused(.invalidDeviceProof(device: device, user: identity.user))
        }
        let shortName = name.flatMap { $0.isEmpty ? nil : String(decoding: $0.utf8.prefix(64), as: UTF8.self) }
        let event = try await appendAsUser(DeviceAddedPayload(name: shortName, proof: proof), object: device.raw)
        // If the new device's encryption key is already here, it gets the
        // user's chat keys now; otherwise after a sync brings it.
        try await shareChatKeys()
        return try outcome(event, device)
    }

    /// The signature a new device gives its user so the user can bind it.
    public nonisolated func bindingProof() throws -> [UInt8] {
        try DeviceBinding.proof(device: KeyStore.read(KeyStore.deviceKeyPath(storePath)), user: identity.user.raw)
    }

    /// Unbinds `device` from this node's user with a `device.removed` event signed
    /// by the user key; `reason` is cut to its first 200 UTF-8 bytes. The device's
    /// earlier events still count but it acts no more (Specs/projections.md §6.1).
    /// Returns once durable; throws ``NodeError/readOnly`` or ``NodeError/noUserKey``.
    @discardableResult
    public func removeDevice(_ device: DeviceID, reason: String? = nil) async throws -> Mutation<DeviceID> {
        let reason = reason.map { String(decoding: $0.utf8.prefix(200), as: UTF8.self) }
        return try await outcome(appendAsUser(DeviceRemovedPayload(reason: reason), object: device.raw), device)
    }

    // MARK: Profile

    /// Sets one profile field of this user to `value`, or clears it with `nil`
    /// (Specs/events.md §6.2.3); ``setProfile(_:)`` with a ``ProfileEdit`` is the typed form.
    /// Returns once durable. Throws `NodeError.refused(.retiredProfileField)` for a
    /// retired field and `EventError.schemaViolation` if `value` does not fit the field.
    @discardableResult
    package func setProfile(_ field: ProfileField, _ value: CBORValue?) async throws -> Mutation<UserID> {
        guard !field.isRetired else {
            throw NodeError.refused(.retiredProfileField(field.rawValue))
        }
        return try await outcome(append(ProfileSetPayload(field: field, value: value), object: identity.user.raw), identity.user)
    }

    // MARK: Relays

    /// Publishes this user's relay list (Specs/events.md §6.2.29), replacing
    /// the previous one; an empty list clears it. Signed by the user key when
    /// this node holds it, else by this device. At most 8 relays, each
    /// with a `host:port` address, the relay node's device key and at least
    /// one role, no key or address twice. Throws
    /// `NodeError.refused(.invalidRelayList)` for a list that breaks a rule.
    @discardableResult
    public func setRelays(_ relays: [Relay]) async throws -> Mutation<UserID> {
        if relays.count > PayloadLimits.maxRelays {
            throw NodeError.refused(.invalidRelayList("at most \(PayloadLimits.maxRelays) relays, got \(relays.count)"))
        }
        for relay in relays {
            guard RelayAddress.isValid(relay.address) else {
                throw NodeError.refused(
                    .invalidRelayList("\"\(relay.address)\" is not host:port (a DNS name or [IPv6 literal], a port 1...65535)"))
            }
            guard !relay.roles.isEmpty, relay.roles.rawValue <= Relay.Roles.all.rawValue else {
                throw NodeError.refused(.invalidRelayList("relay \(relay.address) needs the role home, inbox or both"))
            }
        }
        if Set(relays.map(\.key)).count != relays.count { throw NodeError.refused(.invalidRelayList("a relay key is listed twice")) }
        if Set(relays.map(\.address)).count != relays.count { throw NodeError.refused(.invalidRelayList("an address is listed twice")) }
        // Signed by the user key when this node holds it: the user key's own
        // feed is what every listed relay keeps (Specs/sync.md §8.1), so the
        // list can be found at any of them, not only at the user's home relays.
        let payload = RelaysSetPayload(relays: relays)
        let event = userKey != nil ? try await appendAsUser(payload, object: identity.user.raw) : try await append(payload, object: identity.user.raw)
        return try outcome(event, identity.user)
    }

    // MARK: Pictures

    /// Stores the image bytes (a photo picker's, a file's) as a blob and
    /// creates a picture owned by this user, atomically. The id is chosen
    /// here, so it works offline. `mime` defaults to the type the bytes'
    /// signature shows (PNG, JPEG, GIF, WebP, HEIC, AVIF); other bytes are
    /// refused with `.notAnImage` unless `mime` names their type.
    @discardableResult
    public func addPicture(_ data: Data, mime: String? = nil, caption: String? = nil) async throws -> Mutation<PictureID> {
        try await addPicture([UInt8](data), mime: mime, caption: caption)
    }

    /// `addPicture` for bytes in an array (the command line's form).
    @discardableResult
    package func addPicture(_ bytes: [UInt8], mime: String? = nil, caption: String? = nil) async throws -> Mutation<PictureID> {
        let sniffed = try checkedImage(bytes, mime: mime)
        let mime = sniffed.mime
        // Bound to this device (Specs/events.md §6.4), so no one else can create it.
        let id = CreatedID.random(author: identity.device.raw)
        var payload = PictureCreatedPayload(blob: Blake2b.hash256(bytes), size: UInt64(bytes.count), mime: mime, caption: caption)
        if let w = sniffed.width, let h = sniffed.height { (payload.width, payload.height) = (w, h) }
        return try await outcome(append(payload, object: id, blobs: [bytes]), PictureID(id))
    }

    /// Checks picture bytes against the size cap and recognises their type;
    /// width and height only when both are in the schema's range.
    func checkedImage(_ bytes: [UInt8], mime: String? = nil) throws -> (mime: String, width: UInt64?, height: UInt64?) {
        guard !bytes.isEmpty else { throw NodeError.refused(.emptyPicture) }
        guard bytes.count <= options.maxBlobBytes else {
            throw NodeError.refused(.pictureTooLarge(bytes: bytes.count, limit: options.maxBlobBytes))
        }
        let sniffed = ImageSniffer.sniff(bytes)
        guard let mime = mime ?? sniffed?.mime else {
            throw NodeError.refused(.notAnImage)
        }
        guard let w = sniffed?.width, let h = sniffed?.height, (1...65535).contains(w), (1...65535).contains(h) else {
            return (mime, nil, nil)
        }
        return (mime, w, h)
    }

    /// The picture's record, if it is live and this user's.
    private func ownLivePicture(_ id: PictureID) throws -> PictureView {
        switch try projections.picture(id) {
        case .live(let view):
            guard view.owner == identity.user else { throw NodeError.refused(.pictureNotYours(picture: id, owner: view.owner)) }
            return view
        case .deleted: throw NodeError.refused(.pictureDeleted(id))
        case .unknown: throw NodeError.refused(.unknownPicture(id))
        }
    }

    /// Replaces the caption of one of this user's live pictures (at most 2000
    /// UTF-8 bytes). Returns once durable. Throws `NodeError.refused` with
    /// `.unknownPicture`, `.pictureDeleted` or `.pictureNotYours` when the picture
    /// is not a live picture of this user.
    @discardableResult
    public func captionPicture(_ id: PictureID, _ caption: String) async throws -> Mutation<PictureID> {
        _ = try ownLivePicture(id)
        return try await outcome(append(PictureCaptionedPayload(caption: caption), object: id.raw), id)
    }

    /// Moves a picture within the gallery. Positions are fractional, so a
    /// move changes one picture only and concurrent moves merge (each picture
    /// lands where its last move put it; ties break by picture id).
    @discardableResult
    public func movePicture(_ id: PictureID, to placement: GalleryPlacement) async throws -> Mutation<PictureID> {
        _ = try ownLivePicture(id)
        let gallery = try projections.pictures(of: identity.user).filter { $0.id != id }
        let positions = gallery.map(\.position)
        func index(of other: PictureID) throws -> Int {
            guard let i = gallery.firstIndex(where: { $0.id == other }) else {
                throw NodeError.refused(.pictureNotInGallery(other))
            }
            return i
        }
        let low: [UInt8]?
        let high: [UInt8]?
        switch placement {
        case .first: (low, high) = (nil, positions.first)
        case .last: (low, high) = (positions.last, nil)
        case .before(let other):
            let i = try index(of: other)
            (low, high) = (i > 0 ? positions[i - 1] : nil, positions[i])
        case .after(let other):
            let i = try index(of: other)
            (low, high) = (positions[i], i + 1 < positions.count ? positions[i + 1] : nil)
        }
        guard let position = GalleryPosition.between(low, high) else {
            throw NodeError.refused(.noRoomBetweenPictures)
        }
        return try await outcome(append(PictureMovedPayload(position: position), object: id.raw), id)
    }

    /// Deletes one of this user's live pictures. Deletion is final: replicas purge
    /// its creation and caption payloads and its bytes unless another live picture
    /// uses them (Specs/projections.md §6.3). Returns once durable; throws
    /// `NodeError.refused` (`.unknownPicture`, `.pictureDeleted`, `.pictureNotYours`) otherwise.
    @discardableResult
    public func deletePicture(_ id: PictureID) async throws -> Mutation<PictureID> {
        _ = try ownLivePicture(id)
        return try await outcome(append(PictureDeletedPayload(), object: id.raw), id)
    }

    // MARK: Relationships

    /// Follows `user` with a `follow.added` event. Returns once durable; throws
    /// `NodeError.refused(.cannotFollowYourself)` for this node's own user.
    @discardableResult public func follow(_ user: UserID) async throws -> Mutation<UserID> {
        guard user != identity.user else { throw NodeError.refused(.cannotFollowYourself) }
        return try await add(FollowAddedPayload(), .followAdded, target: user, what: "follow")
    }
    /// Withdraws every follow of `user` by this user that this node has seen
    /// (observed-remove: a follow made concurrently elsewhere survives,
    /// Specs/projections.md §6.4). Returns once durable; throws
    /// `NodeError.refused(.nothingToRemove)` when there is no follow to withdraw.
    @discardableResult public func unfollow(_ user: UserID) async throws -> Mutation<UserID> {
        try await remove(FollowRemovedPayload.self, added: .followAdded, target: user, what: "follow")
    }
    /// Likes a picture or a message with a `like.added` event. Returns once
    /// durable; throws `NodeError.refused(.alreadyAdded)` when this user's
    /// like of it is already live here (a second would change nothing).
    @discardableResult public func like<Object: Likeable>(_ object: Object) async throws -> Mutation<Object> {
        try await add(LikeAddedPayload(), .likeAdded, target: object, what: "like")
    }
    /// Withdraws every like of `object` by this user that this node has seen
    /// (observed-remove, Specs/projections.md §6.4). Returns once durable; throws
    /// `NodeError.refused(.nothingToRemove)` when there is no like to withdraw.
    @discardableResult public func unlike<Object: Likeable>(_ object: Object) async throws -> Mutation<Object> {
        try await remove(LikeRemovedPayload.self, added: .likeAdded, target: object, what: "like")
    }
    /// Blocks `user`: this user's followers, feed and chat pages then leave them
    /// out when read (Specs/projections.md §7.2). Returns once durable; throws
    /// `NodeError.refused(.cannotBlockYourself)` for this node's own user.
    @discardableResult public func block(_ user: UserID) async throws -> Mutation<UserID> {
        guard user != identity.user else { throw NodeError.refused(.cannotBlockYourself) }
        return try await add(BlockAddedPayload(), .blockAdded, target: user, what: "block")
    }
    /// Withdraws every block of `user` by this user that this node has seen
    /// (observed-remove, Specs/projections.md §6.4). Returns once durable; throws
    /// `NodeError.refused(.nothingToRemove)` when there is no block to withdraw.
    @discardableResult public func unblock(_ user: UserID) async throws -> Mutation<UserID> {
        try await remove(BlockRemovedPayload.self, added: .blockAdded, target: user, what: "block")
    }

    /// An add, unless this user's add of the same target is live here: in an
    /// add-wins set a second add changes nothing, so it is not written.
    private func add<P: KindPayload, Object: TypedID>(
        _ payload: P, _ kind: EventKind, target: Object, what: String
    ) async throws -> Mutation<Object> {
        guard try projections.liveAdds(kind, from: identity.user.raw, to: target.raw).isEmpty else {
            throw NodeError.refused(.alreadyAdded(what: what, target: target.raw))
        }
        return try await outcome(append(payload, object: target.raw), target)
    }

    /// A removal names every add of this user it has seen (observed-remove):
    /// adds made concurrently elsewhere survive it.
    private func remove<P: RemovalPayload, Object: TypedID>(
        _ removal: P.Type, added: EventKind, target: Object, what: String
    ) async throws -> Mutation<Object> {
        let seen = try projections.liveAdds(added, from: identity.user.raw, to: target.raw)
        guard !seen.isEmpty else { throw NodeError.refused(.nothingToRemove(what: what, target: target.raw)) }
        return try await outcome(append(P(seen: Array(seen.prefix(PayloadLimits.maxSeenTags))), object: target.raw), target)
    }

    // MARK: Chats

    /// Creates a chat with this user as administrator; the id is chosen
    /// here. The title is sealed to the members (Specs/encryption.md §6):
    /// the creation is followed by the first epoch's key, wrapped to every
    /// member device this node knows.
    @discardableResult
    public func createChat(title: String? = nil, members: [UserID] = []) async throws -> Mutation<ChatID> {
        if let title, title.utf8.count > PayloadLimits.chatTitleBytes { throw NodeError.refused(.titleLength(bytes: title.utf8.count)) }
        // Bound to this device (Specs/events.md §6.4), so no one else can create it.
        let id = CreatedID.random(author: identity.device.raw)
        let key = Random.bytes(32)
        let epoch = ChatCrypto.epochID(chat: id, key: key)
        let sealedTitle = title.map {
            ChatCrypto.seal(
                TitleContent.encode($0), epochKey: key, epoch: epoch, kind: .chatCreated, chat: id, object: id, author: identity.device.raw)
        }
        let others = Array(Set(members.filter { $0 != identity.user }.map(\.raw))).sorted()
        let created = try await append(ChatCreatedPayload(title: sealedTitle, members: others), object: id)
        keyRing.put(id, epoch, key)
        try await shareEpoch(id, epoch: epoch, key: key, to: currentMemberDevices(id))
        return try outcome(created, ChatID(id))
    }

    /// Adds a member (admin only) and wraps the current epoch key to the
    /// member's devices: they read from now on, not the earlier history.
    @discardableResult
    public func addChatMember(_ chat: ChatID, _ user: UserID, admin: Bool = false) async throws -> Mutation<ChatID> {
        let event = try await append(ChatMemberAddedPayload(user: user.raw, admin: admin), object: chat.raw)
        if try projections.noEffect(of: event) == nil {
            let (epoch, key) = try await sendingEpoch(chat.raw)
            let holders = Set(try projections.wraps(of: chat.raw, epoch: epoch).map(\.device))
            let missing = try currentDevices(of: user.raw).filter { !holders.contains($0.device) }
            if !missing.isEmpty { try await shareEpoch(chat.raw, epoch: epoch, key: key, to: missing) }
        }
        return try outcome(event, chat)
    }

    /// Removes a member (admin) or leaves (oneself). A remover who stays a
    /// member starts a new epoch at once, so nothing sent from here on is
    /// readable by the removed member (Specs/encryption.md §6 rule 3).
    @discardableResult
    public func removeChatMember(_ chat: ChatID, _ user: UserID) async throws -> Mutation<ChatID> {
        let event = try await append(ChatMemberRemovedPayload(user: user.raw), object: chat.raw)
        if user != identity.user, try projections.noEffect(of: event) == nil,
            try projections.membership(of: identity.user.raw, in: chat.raw)?.isCurrent == true
        {
            try await rotate(chat.raw)
        }
        return try outcome(event, chat)
    }

    /// Removes this user from `chat` (``removeChatMember(_:_:)`` with oneself).
    /// It starts no new epoch: the remaining members' next send rotates
    /// (Specs/encryption.md §6 rule 3). Returns once durable.
    @discardableResult
    public func leaveChat(_ chat: ChatID) async throws -> Mutation<ChatID> { try await removeChatMember(chat, identity.user) }

    /// Sends a message sealed to the chat's members; the mutation's `object`
    /// is the new message's id (its event id).
    /// `image` is a picture sent inside the chat: its bytes are encrypted
    /// with a key of their own, carried in the sealed body; the blob stored
    /// and synced is the ciphertext (Specs/encryption.md §7). `picture`
    /// refers to an existing picture by id.
    @discardableResult
    public func sendMessage(_ chat: ChatID, text: String? = nil, picture: PictureID? = nil, image: Data? = nil) async throws
        -> Mutation<MessageID>
    {
        try await sendMessage(chat, text: text, picture: picture, image: image.map { [UInt8]($0) })
    }

    /// `sendMessage` with the image's bytes in an array (the command line's form).
    @discardableResult
    package func sendMessage(_ chat: ChatID, text: String? = nil, picture: PictureID? = nil, image: [UInt8]?) async throws
        -> Mutation<MessageID>
    {
        guard text != nil || picture != nil || image != nil else {
            throw NodeError.refused(.emptyMessage)
        }
        if let text { try Self.checkText(text) }
        guard try projections.chatView(chat) != nil else { throw NodeError.refused(.unknownChat(chat)) }
        var content = MessageContent(text: text, picture: picture?.raw)
        var blobs: [[UInt8]] = []
        var payload = MessageSentPayload(body: [])
        if let image {
            let (mime, width, height) = try checkedImage(image)
            let key = Random.bytes(32)
            let sealedImage = ChatCrypto.encryptAttachment(image, key: key)
            content.attachment = Attachment(key: key, mime: mime, size: UInt64(image.count), width: width, height: height)
            blobs.append(sealedImage)
            (payload.blob, payload.size) = (Blake2b.hash256(sealedImage), UInt64(sealedImage.count))
        }
        payload.body = try await seal(content.encoded(), in: chat.raw, kind: .messageSent, object: chat.raw)
        let sent = try await append(payload, object: chat.raw, blobs: blobs)
        return try outcome(sent, MessageID(sent.id))
    }

    /// Refuses a text no member could open once sealed (Specs/encryption.md §7).
    static func checkText(_ text: String) throws {
        let n = text.utf8.count
        guard (1...PayloadLimits.messageTextBytes).contains(n) else { throw NodeError.refused(.textLength(bytes: n)) }
    }

    private func ownMessage(_ id: MessageID) throws -> MessageView {
        guard let m = try projections.message(id) else { throw NodeError.refused(.unknownMessage(id)) }
        guard m.sender == identity.user else { throw NodeError.refused(.notYourMessage(message: id, sender: m.sender)) }
        return m
    }

    /// Replaces the text of one of this user's messages (1…4000 UTF-8 bytes),
    /// sealed to the chat's members; its picture and attachment stay. May first
    /// write `chat.key` events for a new epoch. Returns once durable; throws
    /// `NodeError.refused` with `.unknownMessage` or `.notYourMessage`.
    @discardableResult
    public func editMessage(_ id: MessageID, text: String) async throws -> Mutation<MessageID> {
        try Self.checkText(text)
        let m = try ownMessage(id)
        let body = try await seal(MessageContent(text: text).encoded(), in: m.chat.raw, kind: .messageEdited, object: id.raw)
        return try await outcome(append(MessageEditedPayload(chat: m.chat.raw, body: body), object: id.raw), id)
    }

    /// Deletes one of this user's messages: replicas purge the payloads of the
    /// message and its edits, and its attachment blob (Specs/projections.md §6.6).
    /// Returns once durable; throws `NodeError.refused` with `.unknownMessage` or `.notYourMessage`.
    @discardableResult
    public func deleteMessage(_ id: MessageID) async throws -> Mutation<MessageID> {
        let m = try ownMessage(id)
        return try await outcome(append(MessageDeletedPayload(chat: m.chat.raw), object: id.raw), id)
    }

    /// Marks a chat read up to `message` (markers never move backwards).
    @discardableResult
    public func markRead(_ chat: ChatID, upTo message: MessageID) async throws -> Mutation<ChatID> {
        guard let m = try projections.message(message), m.chat == chat else {
            throw NodeError.refused(.messageNotInChat(message: message, chat: chat))
        }
        return try await outcome(append(ChatReadPayload(message: message.raw, hlc: m.hlc.rawValue), object: chat.raw), chat)
    }

    // MARK: Coins and slots

    /// Credits a purchase (issuer key required). The credit lands on
    /// `device`, or on the user's first device this node knows of. Returns
    /// once durable: only then may the store's transaction be acknowledged.
    /// The mutation's object is the credited user.
    @discardableResult
    public func creditCoins(
        _ amount: UInt64, to user: UserID, receipt: String, device: DeviceID? = nil, product: String? = nil
    ) async throws -> Mutation<UserID> {
        let target = try creditTarget(user: user, device: device)
        return try await outcome(appendAsIssuer(
            CoinCreditedPayload(user: user.raw, amount: amount, receipt: receipt, product: product), object: target.raw), user)
    }

    /// The device a credit lands on: the one named, or the user's first
    /// device this node knows of that is not removed.
    private func creditTarget(user: UserID, device: DeviceID?) throws -> DeviceID {
        if let device { return device }
        guard let first = try projections.devices(of: user).first(where: { $0.removedHLC == nil }) else {
            throw NodeError.refused(.noKnownDevice(user: user))
        }
        return first.device
    }

    /// One purchase to credit (`creditCoins(_:)`).
    public struct Credit: Sendable {
        /// The user key whose purchase this is.
        public var user: UserID
        /// The number of coins bought.
        public var amount: UInt64
        /// The app store's transaction id (1…256 UTF-8 bytes); a receipt is credited
        /// at most once (later credits of it take no effect, `duplicate_receipt`).
        public var receipt: String
        /// The device whose spending rights receive the coins; `nil` picks the user's
        /// first device this node knows of that is not removed.
        public var device: DeviceID?
        /// The store's product id, if any (1…128 UTF-8 bytes).
        public var product: String?
        /// Describes one purchase to credit; see the properties for each field.
        public init(user: UserID, amount: UInt64, receipt: String, device: DeviceID? = nil, product: String? = nil) {
            (self.user, self.amount, self.receipt, self.device, self.product) = (user, amount, receipt, device, product)
        }
    }

    /// Credits many purchases at once (issuer key required), signed on all
    /// cores and committed together; returns once every credit is durable.
    /// A receipt already credited is stored and takes no effect, as with
    /// `creditCoins(_:to:receipt:)`.
    @discardableResult
    public func creditCoins(_ credits: [Credit]) async throws -> [Mutation<UserID>] {
        var items: [PendingEvent] = []
        items.reserveCapacity(credits.count)
        for c in credits {
            let target = try creditTarget(user: c.user, device: c.device)
            items.append(PendingEvent(
                CoinCreditedPayload(user: c.user.raw, amount: c.amount, receipt: c.receipt, product: c.product), object: target.raw))
        }
        let events = try await appendBatch(items, signedBy: .issuer)
        return try zip(events, credits).map { try outcome($0, $1.user) }
    }

    private func requireRights(_ amount: UInt64) throws {
        let held = try projections.rights(of: identity.device)
        guard held >= amount else {
            throw NodeError.refused(.insufficientRights(held: held, needed: amount))
        }
    }

    /// Spends `amount` coins from this device's spending rights; `purpose` (1…200
    /// UTF-8 bytes) says what they pay for. Returns once durable. Throws
    /// `NodeError.refused(.insufficientRights)` if the rights this node sees fall short.
    @discardableResult
    public func spendCoins(_ amount: UInt64, for purpose: String) async throws -> Mutation<UserID> {
        try requireRights(amount)
        return try await outcome(append(CoinSpentPayload(amount: amount, purpose: purpose), object: identity.user.raw), identity.user)
    }

    /// Gives coins to another user; they land on `device` or on the
    /// recipient's first device.
    @discardableResult
    public func giveCoins(_ amount: UInt64, to user: UserID, device: DeviceID? = nil, note: String? = nil) async throws
        -> Mutation<UserID>
    {
        try requireRights(amount)
        let device = try device ?? projections.devices(of: user).first(where: { $0.removedHLC == nil })?.device
        return try await outcome(append(CoinGivenPayload(amount: amount, device: device?.raw, note: note), object: user.raw), user)
    }

    /// Moves spending rights to another device of this user.
    @discardableResult
    public func moveRights(_ amount: UInt64, to device: DeviceID) async throws -> Mutation<DeviceID> {
        try requireRights(amount)
        return try await outcome(append(CoinRightsMovedPayload(amount: amount), object: device.raw), device)
    }

    /// Unlocks lock slot `slot` (1 up to the network's last slot; slot 0 is always
    /// open), paying the price the network configuration sets from this device's
    /// rights. Returns once durable. Throws `NodeError.refused` with `.noSuchSlot`
    /// or `.insufficientRights`.
    @discardableResult
    public func unlockSlot(_ slot: Int) async throws -> Mutation<UserID> {
        let prices = network.slotPrices
        guard slot > 0, slot < prices.count else {
            throw NodeError.refused(.noSuchSlot(slot: slot, lowest: 1, highest: prices.count - 1))
        }
        try requireRights(prices[slot])
        return try await outcome(append(SlotUnlockedPayload(slot: UInt64(slot), price: prices[slot]), object: identity.user.raw), identity.user)
    }

    /// Puts one of this user's pictures in a slot (nil empties it).
    @discardableResult
    public func setSlot(_ slot: Int, picture: PictureID?) async throws -> Mutation<UserID> {
        guard slot >= 0, slot < network.slotCount else {
            throw NodeError.refused(.noSuchSlot(slot: slot, lowest: 0, highest: network.slotCount - 1))
        }
        if let picture { _ = try ownLivePicture(picture) }
        return try await outcome(append(SlotSetPayload(slot: UInt64(slot), picture: picture?.raw), object: identity.user.raw), identity.user)
    }

    // MARK: Network configuration

    /// Creates an issuer key in a closed store and adds it to the store's
    /// network configuration; the next open rebuilds the projections.
    package static func createIssuer(at path: String) throws -> PublicKey {
        guard FileManager.default.fileExists(atPath: KeyStore.deviceKeyPath(path)) else {
            throw NodeError.notInitialized(path: path)
        }
        let keyPath = KeyStore.issuerKeyPath(path)
        if FileManager.default.fileExists(atPath: keyPath) {
            return try KeyStore.read(keyPath).publicKey
        }
        let key = SigningKey.generate()
        try KeyStore.write(key, to: keyPath)
        let configPath = path + "/" + NetworkConfig.fileName
        var config = (try? NetworkConfig.load(from: configPath)) ?? NetworkConfig()
        config.issuers = (config.issuers + [key.publicKey]).sorted()
        try config.write(to: configPath)
        return key.publicKey
    }
}

/// Recognises image files by their first bytes, and reads PNG and GIF sizes.
enum ImageSniffer {
    static func sniff(_ b: [UInt8]) -> (mime: String, width: UInt64?, height: UInt64?)? {
        func be(_ r: Range<Int>) -> UInt64 { b[r].reduce(0) { $0 << 8 | UInt64($1) } }
        if b.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) {
            return b.count >= 24 ? ("image/png", be(16..<20), be(20..<24)) : ("image/png", nil, nil)
        }
        if b.starts(with: [0xFF, 0xD8, 0xFF]) { return ("image/jpeg", nil, nil) }
        if b.starts(with: Array("GIF87a".utf8)) || b.starts(with: Array("GIF89a".utf8)) {
            guard b.count >= 10 else { return ("image/gif", nil, nil) }
            return ("image/gif", UInt64(b[6]) | UInt64(b[7]) << 8, UInt64(b[8]) | UInt64(b[9]) << 8)
        }
        if b.count >= 12, b.starts(with: Array("RIFF".utf8)), b[8..<12].elementsEqual("WEBP".utf8) { return ("image/webp", nil, nil) }
        if b.count >= 12, b[4..<8].elementsEqual("ftyp".utf8) {
            let brand = String(decoding: b[8..<12], as: UTF8.self)
            if brand == "avif" || brand == "avis" { return ("image/avif", nil, nil) }
            if ["heic", "heix", "mif1", "msf1", "heim", "heis"].contains(brand) { return ("image/heic", nil, nil) }
        }
        return nil
    }
}
