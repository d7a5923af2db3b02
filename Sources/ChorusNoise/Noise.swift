// Noise_XXpsk3_25519_ChaChaPoly_BLAKE2b (Specs/sync.md): being written.
enum NoisePlaceholder {}
