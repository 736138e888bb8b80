#include "tests/gpu/model_fixtures.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "tests/gpu/op_test.h"
#include "worker/kv_pool.h"

namespace astr::gputest {

namespace {

// The model files this process wrote, removed when it exits (an open ModelFile keeps its mapping).
struct MadeFiles {
  std::set<std::string> paths;
  ~MadeFiles() {
    for (const std::string& p : paths) std::remove(p.c_str());
  }
};

}  // namespace

StatusOr<std::unique_ptr<model::ModelFile>> OpenModel(const ModelSpec& spec) {
  if (spec.make_args.empty()) return model::ModelFile::Open(SharedPath(spec.shared));
  static MadeFiles made;
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/astr-gpu-" +
                           std::to_string(getpid()) + "-" + spec.name + ".gguf";
  if (made.paths.insert(path).second) {
    const std::string cmd = std::string(ASTR_BIN_DIR) + "/astr make-model " + spec.make_args +
                            " --dtype bf16 --out " + path + " > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      made.paths.erase(path);
      return InternalError("failed: " + cmd);
    }
  }
  return model::ModelFile::Open(path);
}

int32_t WindowTables(const model::ModelFile& file) {
  return KvLayout::For(file.config()).window_tables;
}

BackendOptions Options(bool graphs, bool device_sampling, int32_t window_tables) {
  BackendOptions o;
  o.weight_dtype = "bf16";
  o.page_size = 16;
  o.num_pages = 512 * (1 + window_tables);
  o.max_batch_tokens = 1024;
  o.max_sample_rows = 16;
  o.cuda_graphs = graphs;
  o.device_sampling = device_sampling;
  o.threads = 2;
  return o;
}

std::vector<int32_t> Prompt(int64_t len, int64_t vocab, int64_t salt) {
  std::vector<int32_t> p(len);
  for (int64_t i = 0; i < len; ++i) p[i] = static_cast<int32_t>((i * 37 + salt * 101 + 1) % vocab);
  return p;
}

void Driver::Add(std::vector<int32_t> prompt) {
  tokens.push_back(std::move(prompt));
  num_computed.push_back(0);
}

StepBatch Driver::Step(const std::vector<Feed>& feeds, std::vector<size_t>* sampled) {
  StepBatch b;
  b.set_window_tables(window_tables);
  b.Clear();
  sampled->clear();
  for (const Feed& f : feeds) {
    const int64_t base = static_cast<int64_t>(f.seq) * 32 * (1 + window_tables);
    std::vector<int32_t> pages(32), window(32 * window_tables);
    for (int j = 0; j < 32; ++j) pages[j] = static_cast<int32_t>(base + j);
    for (size_t j = 0; j < window.size(); ++j) window[j] = static_cast<int32_t>(base + 32 + j);
    const int64_t left = static_cast<int64_t>(tokens[f.seq].size()) - num_computed[f.seq];
    const int64_t n = std::min(f.chunk, left);
    const bool last = n == left;
    b.Append(tokens[f.seq].data() + num_computed[f.seq], n, num_computed[f.seq], pages.data(),
             page_size, last, window.data(), 0);
    num_computed[f.seq] += n;
    if (last) sampled->push_back(f.seq);
  }
  return b;
}

StepBatch Driver::Next(std::vector<size_t>* sampled) {
  std::vector<Feed> feeds;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (num_computed[i] < static_cast<int64_t>(tokens[i].size())) feeds.push_back({i, 1 << 20});
  }
  return Step(feeds, sampled);
}

StepBatch Driver::Decode(size_t n, std::vector<size_t>* sampled) {
  std::vector<Feed> feeds;
  for (size_t i = 0; i < n; ++i) feeds.push_back({i, 1});
  return Step(feeds, sampled);
}

void Driver::Accept(const std::vector<size_t>& sampled, const std::vector<float>& logits,
                    int64_t vocab) {
  for (size_t r = 0; r < sampled.size(); ++r) {
    const float* row = logits.data() + static_cast<int64_t>(r) * vocab;
    tokens[sampled[r]].push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
  }
}

}  // namespace astr::gputest
