// `astr tokenize` and `astr detokenize`: the model's tokenizer from the command line, one text or a
// JSON-lines batch.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/base/file_util.h"
#include "common/base/flags.h"
#include "common/base/json_depth.h"
#include "common/text/tokenizer/stream_decoder.h"
#include "common/text/tokenizer/tokenizer.h"
#include "tools/command.h"

namespace astr {
namespace {

using json = nlohmann::json;

int Fail(const char* command, const std::string& message) {
  std::fprintf(stderr, "astr %s: %s\n", command, message.c_str());
  return 1;
}

// Runs `line_fn` on every non-empty line of a JSON-lines file; the error names the line.
template <typename Fn>
Status ForEachJsonLine(const std::string& path, Fn&& line_fn) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open");
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    ASTR_RETURN_IF_ERROR(CheckJsonDepth(line, path + ":" + std::to_string(number)));
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return InvalidArgumentError(path + ":" + std::to_string(number) + ": not valid JSON");
    }
    ASTR_RETURN_IF_ERROR(line_fn(j, number));
  }
  return OkStatus();
}

int RunTokenize(int argc, const char* const* argv) {
  std::string model, text, file, jsonl;
  bool no_add_special = false, parse_special = false, as_json = false;
  FlagSet fs(argv[0], "Turn text into the model's token ids.");
  fs.String("model", &model, "A .gguf file, a Hugging Face model folder, or a tokenizer.json.",
            true);
  fs.String("text", &text, "The text to tokenize.");
  fs.String("file", &file, "Tokenize the whole content of this file instead.");
  fs.String("jsonl", &jsonl,
            "Tokenize each line of this file (one JSON string per line) and print one JSON array "
            "of ids per line.");
  fs.Bool("no-add-special", &no_add_special,
          "Do not add the BOS / EOS tokens that the tokenizer's post-processor adds.");
  fs.Bool("parse-special", &parse_special,
          "Turn special tokens written in the text (e.g. <|im_start|>) into their ids; by default "
          "they are plain text.");
  fs.Bool("json", &as_json,
          "Print {\"ids\": [...], \"tokens\": [...]} instead of one token per line.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  const int sources = fs.WasSet("text") + !file.empty() + !jsonl.empty();
  if (sources != 1) {
    std::fprintf(stderr, "astr tokenize: give exactly one of --text, --file, --jsonl\n");
    return 2;
  }
  auto tokenizer = tok::Tokenizer::Load(model);
  if (!tokenizer.ok()) return Fail("tokenize", tokenizer.status().ToString());
  const tok::EncodeOptions options{.add_special_tokens = !no_add_special,
                                   .parse_special = parse_special};
  if (!jsonl.empty()) {
    Status s = ForEachJsonLine(jsonl, [&](const json& j, int number) -> Status {
      if (!j.is_string()) {
        return InvalidArgumentError(jsonl + ":" + std::to_string(number) + ": not a JSON string");
      }
      std::cout << json((*tokenizer)->Encode(j.get<std::string>(), options)).dump() << "\n";
      return OkStatus();
    });
    return s.ok() ? 0 : Fail("tokenize", s.ToString());
  }
  if (!file.empty()) {
    auto content = ReadFileToString(file);
    if (!content.ok()) return Fail("tokenize", content.status().ToString());
    text = std::move(*content);
  }
  const std::vector<int32_t> ids = (*tokenizer)->Encode(text, options);
  if (as_json) {
    json tokens = json::array();
    for (int32_t id : ids) tokens.push_back((*tokenizer)->IdToToken(id));
    std::cout << json{{"ids", ids}, {"tokens", tokens}}.dump(-1, ' ', false,
                                                             json::error_handler_t::replace)
              << "\n";
    return 0;
  }
  for (int32_t id : ids) {
    std::cout
        << id << "\t"
        << json((*tokenizer)->IdToToken(id)).dump(-1, ' ', false, json::error_handler_t::replace)
        << "\n";
  }
  return 0;
}

// A token id as tokenizers takes it: any u32; ids past the vocabulary decode to nothing.
StatusOr<int32_t> CheckedId(int64_t id) {
  if (id < 0 || id > int64_t{UINT32_MAX}) {
    return InvalidArgumentError("token id " + std::to_string(id) + " is outside 0.." +
                                std::to_string(UINT32_MAX));
  }
  return id > INT32_MAX ? -1 : static_cast<int32_t>(id);  // -1: not in any vocabulary
}

StatusOr<std::vector<int32_t>> IdsFromJson(const json& j) {
  if (!j.is_array()) return InvalidArgumentError("expected a JSON array of ids");
  std::vector<int32_t> ids;
  for (const json& id : j) {
    if (id.is_number_unsigned() && id.get<uint64_t>() > uint64_t{UINT32_MAX}) {
      return InvalidArgumentError("token id " + id.dump() + " is outside 0.." +
                                  std::to_string(UINT32_MAX));
    }
    if (!id.is_number_integer()) return InvalidArgumentError("ids must be integers");
    ASTR_ASSIGN_OR_RETURN(int32_t checked, CheckedId(id.get<int64_t>()));
    ids.push_back(checked);
  }
  return ids;
}

// Decodes one sequence: the text, or with --stream the chunks a streaming client would receive.
json DecodeOne(const tok::Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip_special,
               bool stream) {
  if (!stream) return tokenizer.Decode(ids, skip_special);
  json chunks = json::array();
  tok::StreamDecoder decoder(tokenizer, skip_special);
  for (int32_t id : ids) {
    std::string chunk = decoder.Push(id);
    if (!chunk.empty()) chunks.push_back(std::move(chunk));
  }
  if (std::string rest = decoder.Finish(); !rest.empty()) chunks.push_back(std::move(rest));
  return chunks;
}

int RunDetokenize(int argc, const char* const* argv) {
  std::string model, ids_text, jsonl;
  bool keep_special = false, stream = false;
  FlagSet fs(argv[0], "Turn token ids back into text.");
  fs.String("model", &model, "A .gguf file, a Hugging Face model folder, or a tokenizer.json.",
            true);
  fs.String("ids", &ids_text, "Comma-separated token ids, e.g. 1,15043,3186.");
  fs.String("jsonl", &jsonl,
            "Decode each line of this file (one JSON array of ids per line) and print one JSON "
            "value per line.");
  fs.Bool("keep-special", &keep_special, "Keep special tokens (e.g. </s>) in the text.");
  fs.Bool("stream", &stream,
          "Decode one id at a time like a streaming server and print the JSON array of chunks.");
  if (int rc = fs.ParseOrExit(argc, argv); rc >= 0) return rc;
  if (fs.WasSet("ids") == !jsonl.empty()) {
    std::fprintf(stderr, "astr detokenize: give exactly one of --ids, --jsonl\n");
    return 2;
  }
  auto tokenizer = tok::Tokenizer::Load(model);
  if (!tokenizer.ok()) return Fail("detokenize", tokenizer.status().ToString());
  auto print = [](const json& j) {
    std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  };
  if (!jsonl.empty()) {
    Status s = ForEachJsonLine(jsonl, [&](const json& j, int number) -> Status {
      auto ids = IdsFromJson(j);
      if (!ids.ok()) {
        return InvalidArgumentError(jsonl + ":" + std::to_string(number) + ": " +
                                    ids.status().message());
      }
      print(DecodeOne(**tokenizer, *ids, !keep_special, stream));
      return OkStatus();
    });
    return s.ok() ? 0 : Fail("detokenize", s.ToString());
  }
  std::vector<int32_t> ids;
  if (!ids_text.empty()) {
    auto parsed = ParseIntList(ids_text, "--ids");
    if (!parsed.ok()) {
      std::fprintf(stderr, "astr detokenize: %s\n", parsed.status().message().c_str());
      return 2;
    }
    for (int64_t id : *parsed) {
      auto checked = CheckedId(id);
      if (!checked.ok()) {
        std::fprintf(stderr, "astr detokenize: --ids: %s\n", checked.status().message().c_str());
        return 2;
      }
      ids.push_back(*checked);
    }
  }
  const json out = DecodeOne(**tokenizer, ids, !keep_special, stream);
  if (stream) {
    print(out);
  } else {
    std::cout << out.get<std::string>();
    std::cout.flush();
  }
  return 0;
}

}  // namespace

ASTR_REGISTER_COMMAND("tokenize", "Turn text into the model's token ids.", RunTokenize);
ASTR_REGISTER_COMMAND("detokenize", "Turn token ids back into text.", RunDetokenize);

}  // namespace astr
