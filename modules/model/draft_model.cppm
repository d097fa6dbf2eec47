// A public draft model (--draft model:DIR): the client runs a small public
// checkpoint in the clear, in float64 (the Ref backend, as the accuracy
// check does), and drafts its greedy tokens. It sees only what the client
// holds (the prompt, the chosen tokens, a public model), never the private
// weights. Its tokens must be the target's: a draft model with another
// tokenizer only makes poor guesses, and a draft token the target's
// vocabulary does not have ends the step's drafting (draft_by's filler).
//
// The drafter keeps the draft model's cache over the context it has seen:
// each call feeds only the tokens chosen since (the accepted drafts and
// the correction), then drafts on a copy, so a step costs the draft model
// accepted + 1 + K decode steps, not a new prefill.
//
// Defined in src/model/draft_model.cpp, in the library mpcache-reference
// (the float64 backend's code): link it to draft with a model.
export module mpcache.model:draft_model;
import mpcache.std;
import :draft;

export namespace mpcache {

// The drafter of a public model folder (config.json, model.safetensors);
// `target_vocab`: the private model's vocabulary (drafts are ids of it).
// A folder that cannot be read is an Error naming it.
Drafter model_drafter(const std::filesystem::path& dir, std::size_t target_vocab);

}  // namespace mpcache
