// GGUF tokenizer.ggml.* vocabularies -> Tokenizer, following llama.cpp's reading of them:
//  - "llama": SentencePiece score-based merges with byte fallback; every text segment gets a
//    U+2581 prefix when add_space_prefix (llama.cpp adds it at the start and after each special
//    token) and spaces become U+2581.
//  - "gpt2": byte-level BPE from tokenizer.ggml.merges, with the pre-tokenizer named by
//    tokenizer.ggml.pre (the regex families of the models' tokenizer.json files).
// Control and unknown tokens are special added tokens; user-defined tokens are added tokens that
// are matched in text whether or not special tokens are parsed.
#include <string_view>

#include "common/base/token_ids.h"
#include "common/model/vocab.h"
#include "common/text/tokenizer/tokenizer_builder.h"

namespace astr::tok {
namespace {

using tok::PreTokenizer;

constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt2NoTailRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr std::string_view kDeepseekLetters =
    "\\s?[A-Za-z\xC2\xB5\xC3\x80-\xC3\x96\xC3\x98-\xC3\xB6\xC3\xB8-\xC6\xBA\xC6\xBC-\xC6\xBF"
    "\xC7\x84-\xCA\x93\xCA\x95-\xCA\xAF\xCD\xB0-\xCD\xB3\xCD\xB6\xCD\xB7\xCD\xBB-\xCD\xBD\xCD\xBF"
    "\xCE\x86\xCE\x88-\xCE\x8A\xCE\x8C\xCE\x8E-\xCE\xA1\xCE\xA3-\xCF\xB5\xCF\xB7-\xD2\x81"
    "\xD2\x8A-\xD4\xAF\xD4\xB1-\xD5\x96\xE1\x82\xA0-\xE1\x83\x85\xE1\x8E\xA0-\xE1\x8F\xB5"
    "\xE1\x8F\xB8-\xE1\x8F\xBD\xE1\xB2\x90-\xE1\xB2\xBA\xE1\xB2\xBD-\xE1\xB2\xBF"
    "\xE1\xB4\x80-\xE1\xB4\xAB\xE1\xB5\xAB-\xE1\xB5\xB7\xE1\xB5\xB9-\xE1\xB6\x9A"
    "\xE1\xB8\x80-\xE1\xBC\x95\xE1\xBC\x98-\xE1\xBC\x9D\xE1\xBC\xA0-\xE1\xBD\x85"
    "\xE1\xBD\x88-\xE1\xBD\x8D\xE1\xBD\x90-\xE1\xBD\x97\xE1\xBD\x99\xE1\xBD\x9B\xE1\xBD\x9D"
    "\xE1\xBD\x9F-\xE1\xBD\xBD\xE1\xBE\x80-\xE1\xBE\xB4\xE1\xBE\xB6-\xE1\xBE\xBC\xE1\xBE\xBE"
    "\xE1\xBF\x82-\xE1\xBF\x84\xE1\xBF\x86-\xE1\xBF\x8C\xE1\xBF\x90-\xE1\xBF\x93"
    "\xE1\xBF\x96-\xE1\xBF\x9B\xE1\xBF\xA0-\xE1\xBF\xAC\xE1\xBF\xB2-\xE1\xBF\xB4"
    "\xE1\xBF\xB6-\xE1\xBF\xBC\xE2\x84\x82\xE2\x84\x87\xE2\x84\x8A-\xE2\x84\x93\xE2\x84\x95"
    "\xE2\x84\x99-\xE2\x84\x9D\xE2\x84\xA4\xE2\x84\xA6\xE2\x84\xA8\xE2\x84\xAA-\xE2\x84\xAD"
    "\xE2\x84\xAF-\xE2\x84\xB4\xE2\x84\xB9\xE2\x84\xBC-\xE2\x84\xBF\xE2\x85\x85-\xE2\x85\x89"
    "\xE2\x85\x8E\xE2\x86\x83\xE2\x86\x84\xE2\xB0\x80-\xE2\xB1\xBB\xE2\xB1\xBE-\xE2\xB3\xA4"
    "\xE2\xB3\xAB-\xE2\xB3\xAE\xE2\xB3\xB2\xE2\xB3\xB3\xEA\x99\x80-\xEA\x99\xAD"
    "\xEA\x9A\x80-\xEA\x9A\x9B\xEA\x9C\xA2-\xEA\x9D\xAF\xEA\x9D\xB1-\xEA\x9E\x87"
    "\xEA\x9E\x8B-\xEA\x9E\x8E\xEA\xAD\xB0-\xEA\xAE\xBF\xEF\xAC\x80-\xEF\xAC\x86"
    "\xEF\xAC\x93-\xEF\xAC\x97\xEF\xBC\xA1-\xEF\xBC\xBA\xEF\xBD\x81-\xEF\xBD\x9A"
    "\xF0\x90\x90\x80-\xF0\x90\x91\x8F\xF0\x90\x92\xB0-\xF0\x90\x93\x93"
    "\xF0\x90\x93\x98-\xF0\x90\x93\xBB\xF0\x90\xB2\x80-\xF0\x90\xB2\xB2"
    "\xF0\x90\xB3\x80-\xF0\x90\xB3\xB2\xF0\x91\xA2\xA0-\xF0\x91\xA3\x9F"
    "\xF0\x9E\xA4\x80-\xF0\x9E\xA5\x83]+";
constexpr std::string_view kDeepseekPunct =
    "\\s?[!-/:-~\xEF\xBC\x81-\xEF\xBC\x8F\xEF\xBC\x9A-\xEF\xBD\x9E\xE2\x80\x98-\xE2\x80\x9F"
    "\xE3\x80\x80-\xE3\x80\x82]+";
constexpr std::string_view kCjkRun =
    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+";

// How one tokenizer.ggml.pre family pre-tokenizes: regex splits (each Isolated), in order,
// optionally after individual-digit splitting, then the byte-level mapping.
struct PreFamily {
  std::vector<std::string_view> names;
  std::vector<std::string_view> regexes = {};
  bool digits_first = false;  // Digits(individual_digits) before the regexes
  bool gpt2_regex = false;    // ByteLevel's own GPT-2 regex after the splits
  bool nfc = false;
  bool ignore_merges = false;
};

const std::vector<PreFamily>& PreFamilies() {
  static const std::vector<PreFamily> families = {
      {.names = {"gpt-2", "mpt", "olmo", "jais", "phi-2", "roberta-bpe", "jina-v1-en", "jina-v2-en",
                 "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "jina-v2-code", "gigachat"},
       .gpt2_regex = true},
      {.names = {"llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe", "chatglm-bpe"},
       .regexes = {kLlama3Regex},
       .ignore_merges = true},
      {.names = {"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez"},
       .regexes = {kQwen2Regex},
       .nfc = true},
      {.names = {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       .digits_first = true,
       .gpt2_regex = true},
      {.names = {"deepseek-llm"},
       .regexes = {"[\r\n]", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kCjkRun, R"(\p{N}+)"}},
      {.names = {"deepseek-coder"},
       .regexes = {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkRun, R"(\p{N})"}},
      {.names = {"falcon"},
       .regexes = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2NoTailRegex, "[0-9][0-9][0-9]"}},
      {.names = {"tekken"}, .regexes = {kTekkenRegex}, .ignore_merges = true},
      {.names = {"poro-chat", "bloom", "gpt3-finnish"},
       .regexes = {R"( ?[^(\s|.,!?…。，、।۔،)]+)"}},
      {.names = {"viking"}, .regexes = {R"( ?[^(\s|.,!?…。，、।۔،)]+)", R"(\p{N})"}},
      {.names = {"default", ""},
       .regexes = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2NoTailRegex, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
  };
  return families;
}

StatusOr<const PreFamily*> FindPreFamily(const std::string& pre) {
  for (const PreFamily& f : PreFamilies()) {
    for (std::string_view name : f.names) {
      if (name == pre) return &f;
    }
  }
  return UnimplementedError("tokenizer.ggml.pre \"" + pre + "\" is not a supported pre-tokenizer");
}

StatusOr<std::unique_ptr<PreTokenizer>> BytePreTokenizer(const PreFamily& family) {
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  if (family.digits_first) parts.push_back(tok::MakeDigitsPreTokenizer(true));
  for (std::string_view regex : family.regexes) {
    ASTR_ASSIGN_OR_RETURN(tok::Pattern p, tok::Pattern::FromRegex(regex));
    parts.push_back(tok::MakeSplitPreTokenizer(std::move(p), tok::SplitBehavior::kIsolated, false));
  }
  ASTR_ASSIGN_OR_RETURN(auto byte_level, tok::MakeByteLevelPreTokenizer(false, family.gpt2_regex));
  parts.push_back(std::move(byte_level));
  return tok::MakeSequencePreTokenizer(std::move(parts));
}

StatusOr<std::vector<std::pair<std::string, std::string>>> SplitMerges(const model::Vocab& vocab) {
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(vocab.merges.size());
  for (size_t i = 0; i < vocab.merges.size(); ++i) {
    const std::string& m = vocab.merges[i];
    const size_t space = m.find(' ', 1);
    if (space == std::string::npos) {
      return InvalidArgumentError("tokenizer.ggml.merges[" + std::to_string(i) + "] \"" + m +
                                  "\" is not two tokens separated by a space");
    }
    merges.emplace_back(m.substr(0, space), m.substr(space + 1));
  }
  return merges;
}

void AddGgufTokens(const model::Vocab& vocab, TokenizerBuilder& b) {
  for (size_t i = 0; i < vocab.types.size(); ++i) {
    const model::TokenType type = vocab.types[i];
    if (type != model::TokenType::kControl && type != model::TokenType::kUnknown &&
        type != model::TokenType::kUserDefined) {
      continue;
    }
    if (vocab.tokens[i].empty()) continue;
    tok::AddedToken t;
    t.id = static_cast<int32_t>(i);
    t.content = vocab.tokens[i];
    t.special = type != model::TokenType::kUserDefined;
    b.add_token(std::move(t));
  }
}

}  // namespace

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromGgufVocab(const model::Vocab& vocab,
                                                                    const std::string& source) {
  auto fail = [&](const Status& s) { return Status(s.code(), source + ": " + s.message()); };
  TokenizerBuilder b;
  if (vocab.model == "llama") {
    auto model = tok::MakeSpmModel(vocab.tokens, vocab.scores, vocab.unk_id);
    if (!model.ok()) return fail(model.status());
    b.set_model(std::move(*model));
    b.set_pre_tokenizer(nullptr);
    // Spaces -> U+2581, and a U+2581 prefix per segment (llama.cpp: at the start and after every
    // special token).
    b.set_normalizer(tok::MakeSentencePieceNormalizer(vocab.add_space_prefix));
    b.set_decoder(tok::MakeSentencePieceDecoder(vocab.add_space_prefix));
    b.set_kind("SentencePiece (GGUF llama)");
  } else if (vocab.model == "gpt2") {
    auto family = FindPreFamily(vocab.pre);
    if (!family.ok()) return fail(family.status());
    auto merges = SplitMerges(vocab);
    if (!merges.ok()) return fail(merges.status());
    tok::TokenMap map;
    map.reserve(vocab.tokens.size());
    for (size_t i = 0; i < vocab.tokens.size(); ++i) {
      map.insert_or_assign(vocab.tokens[i], static_cast<int32_t>(i));
    }
    tok::BpeOptions options;
    options.ignore_merges = (*family)->ignore_merges;
    auto model = tok::MakeBpeModel(std::move(map), *merges, options);
    if (!model.ok()) return fail(model.status());
    b.set_model(std::move(*model));
    auto pre = BytePreTokenizer(**family);
    if (!pre.ok()) return fail(pre.status());
    b.set_pre_tokenizer(std::move(*pre));
    if ((*family)->nfc) b.set_normalizer(tok::MakeNfcNormalizer());
    b.set_decoder(tok::MakeByteLevelDecoder());
    b.set_kind("BPE (byte-level, GGUF pre \"" + vocab.pre + "\")");
  } else {
    return fail(UnimplementedError("tokenizer.ggml.model \"" + vocab.model +
                                   "\" is not supported (llama, gpt2)"));
  }
  AddGgufTokens(vocab, b);
  std::vector<int32_t> prefix, suffix;
  if (vocab.add_bos && vocab.bos_id >= 0) prefix.push_back(static_cast<int32_t>(vocab.bos_id));
  if (vocab.add_eos && vocab.eos_id >= 0) suffix.push_back(static_cast<int32_t>(vocab.eos_id));
  b.set_post_processor(std::move(prefix), std::move(suffix));
  b.set_bos_id(static_cast<int32_t>(vocab.bos_id));
  std::vector<int32_t> eos;
  for (int64_t id : {vocab.eos_id, vocab.eot_id, vocab.eom_id}) {
    if (id >= 0) AddTokenId(&eos, id);
  }
  // Generation also ends on the turn-end tokens llama.cpp recognizes by their text
  // (llama-vocab.cpp), as control or user-defined pieces: files that name no eot id (Google's
  // Gemma 3 GGUFs have none) still stop on Gemma's <end_of_turn>, ChatML's <|im_end|>, ...
  static constexpr std::string_view kEndOfGeneration[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",  "<|endoftext|>",
      "<|eom_id|>", "<EOT>",      "_<EOT>",  "<|end_of_text|>"};
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const model::TokenType type =
        id < vocab.types.size() ? vocab.types[id] : model::TokenType::kControl;
    if (type != model::TokenType::kControl && type != model::TokenType::kUserDefined) continue;
    for (std::string_view text : kEndOfGeneration) {
      if (vocab.tokens[id] == text) AddTokenId(&eos, static_cast<int64_t>(id));
    }
  }
  b.set_eos_ids(std::move(eos));
  return b.Build(source);
}

}  // namespace astr::tok
