// scheduler/front/output_processor + stop_matcher: detokenized streaming text, stop strings across
// token boundaries, min_tokens, include_stop_str_in_output, multi-byte characters split over byte
// tokens, skip_special_tokens. Token ids and texts come from stories260K's vocabulary and its
// llama.cpp golden continuation (models/README.md); expected texts are written by hand.
#include "scheduler/front/output_processor.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/text/unicode/unicode.h"
#include "tests/support/test_util.h"

namespace astr::front {
namespace {

// "Once upon a time" with BOS, and llama.cpp's greedy continuation of it:
// "," " there" " was" " a" " little" " g" "ir" "l" " named" " Lily" "." " She" " lo" "ved" " to"
const std::vector<int32_t> kPrompt = {1, 403, 407, 261, 378};
const std::vector<int32_t> kGolden = {432, 383, 286, 261, 376, 298, 315, 421,
                                      395, 317, 426, 338, 401, 396, 267};
const std::string kGoldenText = ", there was a little girl named Lily. She loved to";

sched::SampleEvent Token(int32_t id, float logprob = 0.0f) {
  sched::SampleEvent e;
  e.kind = sched::SampleEvent::Kind::kToken;
  e.token_id = id;
  e.logprob = logprob;
  e.weight_version = 3;
  return e;
}

// What one sample produced, token by token.
struct SampleRun {
  std::vector<std::string> deltas;  // text delta after each token, then the Finish delta
  std::string text;                 // all deltas joined
  int stopped_at = -1;              // index of the token where a stop string ended the sample
  SampleDelta last;                 // the delta that finished the sample
  int32_t num_tokens = 0;
  std::vector<int32_t> token_ids;
};

class OutputProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASTR_REQUIRE_SHARED_FILE(path, "models/stories260K.gguf");
    auto tok = tok::Tokenizer::Load(path);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tok_ = *tok;
  }

  // Feeds `ids` one at a time, then finishes with `reason` unless a stop string ended it.
  SampleRun Feed(const OutputOptions& options, const std::vector<int32_t>& ids,
                 const std::vector<int32_t>& prompt = kPrompt,
                 v1::FinishReason reason = v1::FINISH_REASON_LENGTH) {
    SampleRun run;
    SampleOutput out(*tok_, options, prompt);
    auto take = [&] {
      SampleDelta d = out.TakeDelta();
      EXPECT_TRUE(unicode::IsValidUtf8(d.text)) << "split character in '" << d.text << "'";
      run.text += d.text;
      run.deltas.push_back(d.text);
      run.token_ids.insert(run.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
      if (d.finished) run.last = d;
    };
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool stopped = out.AddToken(Token(ids[i]));
      if (stopped) {
        EXPECT_EQ(run.stopped_at, -1) << "stopped twice";
        run.stopped_at = static_cast<int>(i);
      }
      take();
    }
    out.Finish(reason, -1);
    take();
    run.num_tokens = out.num_tokens();
    return run;
  }

  std::shared_ptr<const tok::Tokenizer> tok_;
};

OutputOptions Stops(std::vector<std::string> stops, bool include = false, int32_t min_tokens = 0) {
  OutputOptions o;
  o.stop = std::move(stops);
  o.include_stop_str_in_output = include;
  o.min_tokens = min_tokens;
  return o;
}

TEST_F(OutputProcessorTest, WithoutStopStringsTheTextIsTheWholeDecode) {
  SampleRun run = Feed(OutputOptions{}, kGolden);
  EXPECT_EQ(run.text, kGoldenText);
  EXPECT_EQ(run.stopped_at, -1);
  EXPECT_EQ(run.token_ids, kGolden);
  EXPECT_TRUE(run.last.finished);
  EXPECT_EQ(run.last.finish_reason, v1::FINISH_REASON_LENGTH);
  EXPECT_FALSE(run.last.stop_string.has_value());
}

TEST_F(OutputProcessorTest, StopStringsSplitAcrossTokensInEveryWay) {
  struct Case {
    std::string stop;
    std::string text;  // what the client gets
    int stopped_at;    // the token that completes the stop string
  };
  const std::vector<Case> cases = {
      {",", "", 0},                                                    // the first token
      {"her", ", t", 1},                                               // inside one token
      {"e wa", ", ther", 2},                                           // across two tokens
      {"girl", ", there was a little ", 7},                            // across three tokens
      {"Lily.", ", there was a little girl named ", 10},               // token + token
      {". She lo", ", there was a little girl named Lily", 12},        // three tokens
      {"ved", ", there was a little girl named Lily. She lo", 13},     // exactly one token
      {"ved to", ", there was a little girl named Lily. She lo", 14},  // the last token
      {" little girl named", ", there was a", 8},                      // spans five tokens
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("stop '" + c.stop + "'");
    SampleRun run = Feed(Stops({c.stop}), kGolden);
    EXPECT_EQ(run.text, c.text);
    EXPECT_EQ(run.stopped_at, c.stopped_at);
    // The stopping token is returned; the later ones are ignored.
    EXPECT_EQ(run.num_tokens, c.stopped_at + 1);
    EXPECT_EQ(run.token_ids,
              std::vector<int32_t>(kGolden.begin(), kGolden.begin() + c.stopped_at + 1));
    EXPECT_EQ(run.last.finish_reason, v1::FINISH_REASON_STOP);
    ASSERT_TRUE(run.last.stop_string.has_value());
    EXPECT_EQ(*run.last.stop_string, c.stop);
    // Text handed out before the stop was always a prefix of the final text: no piece of a
    // stop string ever left early.
    std::string so_far;
    for (const std::string& d : run.deltas) {
      so_far += d;
      EXPECT_EQ(c.text.compare(0, so_far.size(), so_far), 0) << "leaked: '" << so_far << "'";
    }
  }
}

TEST_F(OutputProcessorTest, APossibleStopIsHeldBackThenReleased) {
  // "girl" could begin "girls": held from " g" until " named" rules it out.
  SampleRun run = Feed(Stops({"girls"}), kGolden);
  EXPECT_EQ(run.text, kGoldenText);
  EXPECT_EQ(run.stopped_at, -1);
  const std::vector<std::string> want = {",",   " there", " was",       " a",    " little", " ",
                                         "",    "",       "girl named", " Lily", ".",       " She",
                                         " lo", "ved",    " to",        ""};
  EXPECT_EQ(run.deltas, want);
}

TEST_F(OutputProcessorTest, IncludeStopStringInOutput) {
  SampleRun run = Feed(Stops({"girl"}, /*include=*/true), kGolden);
  EXPECT_EQ(run.text, ", there was a little girl");
  EXPECT_EQ(run.stopped_at, 7);
  SampleRun mid = Feed(Stops({"her"}, /*include=*/true), kGolden);
  EXPECT_EQ(mid.text, ", ther");
}

TEST_F(OutputProcessorTest, OverlappingCandidatesTheOneThatEndsFirstWins) {
  struct Case {
    std::vector<std::string> stops;
    std::string text;
    std::string matched;
  };
  const std::vector<Case> cases = {
      // "a little" ends before "little girl" does.
      {{"little girl", "a little"}, ", there was ", "a little"},
      // Both end at the same character: the one that starts first.
      {{"girl", "le girl"}, ", there was a litt", "le girl"},
      // "here" ends inside " there", before "there was" can complete.
      {{"there was", "here"}, ", t", "here"},
      {{"Lily. She", "ly. S", "y. Sh"}, ", there was a little girl named Li", "ly. S"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.matched);
    SampleRun run = Feed(Stops(c.stops), kGolden);
    EXPECT_EQ(run.text, c.text);
    ASSERT_TRUE(run.last.stop_string.has_value());
    EXPECT_EQ(*run.last.stop_string, c.matched);
  }
}

TEST_F(OutputProcessorTest, StopStringsDoNotCountBeforeMinTokens) {
  // "there" completes with the 2nd token.
  EXPECT_EQ(Feed(Stops({"there"}, false, /*min_tokens=*/2), kGolden).text, ", ");
  SampleRun late = Feed(Stops({"there"}, false, /*min_tokens=*/3), kGolden);
  EXPECT_EQ(late.text, kGoldenText);  // passed over for good
  EXPECT_EQ(late.last.finish_reason, v1::FINISH_REASON_LENGTH);
  // "there was" starts before min_tokens but completes with the 3rd token: it counts.
  EXPECT_EQ(Feed(Stops({"there was"}, false, 3), kGolden).text, ", ");
  // "a" first appears in " was" (3rd token), then in " a" (4th).
  EXPECT_EQ(Feed(Stops({"a"}), kGolden).text, ", there w");
  EXPECT_EQ(Feed(Stops({"a"}, false, 4), kGolden).text, ", there was ");
}

TEST_F(OutputProcessorTest, MultiByteCharactersOverByteTokensAreNeverSplit) {
  // " " then the byte tokens of 日 (E6 97 A5) and 本 (E6 9C AC), then ".".
  const std::vector<int32_t> ids = {410, 233, 154, 168, 233, 159, 175, 426};
  const std::vector<int32_t> prompt = {1, 403};        // "Once"
  SampleRun run = Feed(OutputOptions{}, ids, prompt);  // Feed checks every delta is valid UTF-8
  EXPECT_EQ(run.text, " 日本.");
  // Stop strings made of multi-byte characters, completed by byte tokens.
  SampleRun stop = Feed(Stops({"日"}), ids, prompt);
  EXPECT_EQ(stop.text, " ");
  SampleRun stop2 = Feed(Stops({"本."}), ids, prompt);
  EXPECT_EQ(stop2.text, " 日");
  // Without the final ".", the characters are only known at the end: the stop string still
  // matches in the text the decoder flushes.
  const std::vector<int32_t> no_dot(ids.begin(), ids.end() - 1);
  SampleRun flushed = Feed(Stops({"本"}), no_dot, prompt);
  EXPECT_EQ(flushed.text, " 日");
  EXPECT_EQ(flushed.last.finish_reason, v1::FINISH_REASON_STOP);
  ASSERT_TRUE(flushed.last.stop_string.has_value());
  EXPECT_EQ(*flushed.last.stop_string, "本");
}

TEST_F(OutputProcessorTest, ByteLevelBpeCharactersAreNeverSplit) {
  const std::string path =
      testing::SharedFile("tokenizers/hf/smollm2-135m-instruct/tokenizer.json");
  if (path.empty()) GTEST_SKIP() << "shared SmolLM2 tokenizer missing";
  auto tok = tok::Tokenizer::Load(path);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string text = "Llamas 🦙 über alles";
  const std::vector<int32_t> ids = (*tok)->Encode(text, {.add_special_tokens = false});
  // The emoji alone takes several byte-level tokens, so some tokens end mid-character.
  ASSERT_GT((*tok)->Encode("🦙", {.add_special_tokens = false}).size(), 1u);
  std::swap(tok_, *tok);
  SampleRun run = Feed(OutputOptions{}, ids, {});  // Feed checks every delta is valid UTF-8
  EXPECT_EQ(run.text, text);
  EXPECT_EQ(Feed(Stops({"🦙"}), ids, {}).text, "Llamas ");
  EXPECT_EQ(Feed(Stops({"ü"}), ids, {}).text, "Llamas 🦙 ");
}

TEST_F(OutputProcessorTest, SkipSpecialTokens) {
  const std::vector<int32_t> ids = {432, 2};  // "," then EOS "</s>"
  OutputOptions keep;
  keep.skip_special_tokens = false;
  EXPECT_EQ(Feed(OutputOptions{}, ids, kPrompt, v1::FINISH_REASON_EOS).text, ",");
  SampleRun kept = Feed(keep, ids, kPrompt, v1::FINISH_REASON_EOS);
  EXPECT_EQ(kept.text, ",</s>");
  EXPECT_EQ(kept.last.finish_reason, v1::FINISH_REASON_EOS);
  // A stop string may match a special token's text only when it is in the text.
  keep.stop = {"</s>"};
  EXPECT_EQ(Feed(keep, ids).text, ",");
  EXPECT_EQ(Feed(Stops({"</s>"}), ids, kPrompt, v1::FINISH_REASON_EOS).last.finish_reason,
            v1::FINISH_REASON_EOS);
}

TEST_F(OutputProcessorTest, StopTokenIdAndLogprobs) {
  OutputOptions o;
  o.return_logprobs = true;
  o.top_logprobs = 1;
  SampleOutput out(*tok_, o, kPrompt);
  sched::SampleEvent e = Token(432, -0.5f);
  e.top = {{432, -0.5f}};
  EXPECT_FALSE(out.AddToken(e));
  EXPECT_FALSE(out.AddToken(Token(7, -2.0f)));
  out.Finish(v1::FINISH_REASON_STOP, 7);
  SampleDelta d = out.TakeDelta();
  EXPECT_EQ(d.token_ids, (std::vector<int32_t>{432, 7}));
  EXPECT_EQ(d.logprobs, (std::vector<float>{-0.5f, -2.0f}));
  ASSERT_EQ(d.top.size(), 2u);
  ASSERT_EQ(d.top[0].size(), 1u);
  EXPECT_EQ(d.top[0][0].id, 432);
  EXPECT_TRUE(d.top[1].empty());
  EXPECT_EQ(d.weight_version, 3);
  EXPECT_TRUE(d.finished);
  EXPECT_EQ(d.finish_reason, v1::FINISH_REASON_STOP);
  EXPECT_FALSE(d.stop_string.has_value());
  ASSERT_TRUE(d.stop_token_id.has_value());
  EXPECT_EQ(*d.stop_token_id, 7);
  EXPECT_TRUE(out.done());
  EXPECT_TRUE(out.TakeDelta().empty());
}

// One mask per token, in token order, across deltas; none when not asked.
TEST_F(OutputProcessorTest, SamplingMasksFollowTheirTokens) {
  OutputOptions o;
  o.return_sampling_mask = true;
  SampleOutput out(*tok_, o, kPrompt);
  sched::SampleEvent a = Token(432);
  a.mask = {2, {7, 432}};
  sched::SampleEvent b = Token(7);
  b.mask = {512, {}};
  EXPECT_FALSE(out.AddToken(a));
  SampleDelta first = out.TakeDelta();
  ASSERT_EQ(first.masks.size(), 1u);
  EXPECT_EQ(first.masks[0].count, 2);
  EXPECT_EQ(first.masks[0].ids, (std::vector<int32_t>{7, 432}));
  EXPECT_FALSE(out.AddToken(b));
  SampleDelta second = out.TakeDelta();
  ASSERT_EQ(second.masks.size(), 1u);
  EXPECT_EQ(second.masks[0].count, 512);
  EXPECT_TRUE(second.masks[0].ids.empty());

  SampleOutput plain(*tok_, OutputOptions{}, kPrompt);
  EXPECT_FALSE(plain.AddToken(a));
  EXPECT_TRUE(plain.TakeDelta().masks.empty());
}

TEST_F(OutputProcessorTest, RequestRoutesEventsPerSample) {
  OutputOptions o = Stops({"there"});
  OutputProcessor p(*tok_, o, kPrompt, 2);
  std::vector<sched::SampleEvent> events;
  for (int32_t id : {432, 383, 286}) {  // ", there was" to both samples, interleaved
    for (int32_t index : {0, 1}) {
      events.push_back(Token(id));
      events.back().index = index;
    }
  }
  std::vector<int32_t> stopped;
  p.Apply(events, &stopped);
  EXPECT_EQ(stopped, (std::vector<int32_t>{0, 1}));  // both hit "there" at their 2nd token
  EXPECT_TRUE(p.all_done());
  EXPECT_EQ(p.completion_tokens(), 4);  // " was" came after the stop: not returned
  EXPECT_EQ(p.sample(1).TakeDelta().text, ", ");

  OutputProcessor q(*tok_, OutputOptions{}, kPrompt, 2);
  std::vector<sched::SampleEvent> first = {Token(432)};
  sched::SampleEvent fin;
  fin.kind = sched::SampleEvent::Kind::kFinished;
  fin.finish = v1::FINISH_REASON_EOS;
  first.push_back(fin);
  stopped.clear();
  q.Apply(first, &stopped);
  EXPECT_TRUE(stopped.empty());
  EXPECT_FALSE(q.all_done());
  q.AbortUnfinished();
  EXPECT_TRUE(q.all_done());
  EXPECT_EQ(q.sample(0).TakeDelta().finish_reason, v1::FINISH_REASON_EOS);
  EXPECT_EQ(q.sample(1).TakeDelta().finish_reason, v1::FINISH_REASON_ABORT);
}

// Prompt scores are the request's, not a sample's: they do not touch sample 0's output, come in
// position order and are complete once prompt size - logprob_start have arrived.
TEST_F(OutputProcessorTest, PromptScoresAreKeptApartFromTheSamples) {
  OutputOptions o;
  o.top_logprobs = 1;
  o.logprob_start = 2;  // kPrompt has 5 tokens: positions 2, 3, 4
  OutputProcessor p(*tok_, o, kPrompt, 2);
  EXPECT_FALSE(p.prompt_scored());
  auto score = [](int32_t position, float logprob, int64_t version) {
    sched::SampleEvent e;
    e.kind = sched::SampleEvent::Kind::kPromptLogprob;
    e.position = position;
    e.token_id = kPrompt[position];
    e.logprob = logprob;
    e.top = {{7, -0.25f}};
    e.weight_version = version;
    return e;
  };
  std::vector<int32_t> stopped;
  sched::SampleEvent token = Token(432);
  token.index = 1;  // sample 1 may run ahead of sample 0's prefill
  p.Apply({score(2, -1.5f, 4), token, score(3, -2.5f, 4)}, &stopped);
  EXPECT_FALSE(p.prompt_scored());
  p.Apply({score(4, -3.5f, 5)}, &stopped);
  EXPECT_TRUE(p.prompt_scored());
  EXPECT_EQ(p.prompt_scores().logprobs, (std::vector<float>{-1.5f, -2.5f, -3.5f}));
  ASSERT_EQ(p.prompt_scores().top.size(), 3u);
  EXPECT_EQ(p.prompt_scores().top[2][0].id, 7);
  EXPECT_EQ(p.prompt_scores().weight_version, 5);  // the last scoring step's
  EXPECT_FALSE(p.sample(0).done());
  EXPECT_TRUE(p.sample(0).TakeDelta().empty());
  EXPECT_EQ(p.sample(1).TakeDelta().token_ids, (std::vector<int32_t>{432}));

  // Without logprob_start there is nothing to wait for; stray scores are ignored.
  OutputProcessor none(*tok_, OutputOptions{}, kPrompt, 1);
  EXPECT_TRUE(none.prompt_scored());
  none.Apply({score(2, -1.0f, 1)}, &stopped);
  EXPECT_TRUE(none.prompt_scores().logprobs.empty());
  // logprob_start = prompt size: an empty list, complete from the start.
  OutputOptions empty;
  empty.logprob_start = 5;
  EXPECT_TRUE(OutputProcessor(*tok_, empty, kPrompt, 1).prompt_scored());
}

}  // namespace
}  // namespace astr::front

namespace astr::front {
namespace {

// The first stop string to complete, found the slow way: the smallest end, then the longest.
std::string ReferenceStop(const std::string& text, const std::vector<std::string>& stops) {
  for (size_t end = 1; end <= text.size(); ++end) {
    const std::string* best = nullptr;
    for (const std::string& s : stops) {
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0 &&
          (best == nullptr || s.size() > best->size())) {
        best = &s;
      }
    }
    if (best != nullptr) return text.substr(0, end - best->size());
  }
  return text;
}

TEST(StopMatcherTest, SameResultWhateverTheChunking) {
  const std::vector<std::string> stops = {"ab", "aab", "bab", "abba", "bbb"};
  uint32_t rng = 12345;
  auto next = [&rng] {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 16;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    // Texts from a two-letter alphabet hit every overlap; a few stops each time.
    std::string text;
    for (size_t n = 1 + next() % 12; n > 0; --n) text += (next() % 3 == 0) ? 'b' : 'a';
    std::vector<std::string> some;
    for (const std::string& s : stops) {
      if (next() % 2 == 0) some.push_back(s);
    }
    if (some.empty()) some.push_back("bbb");
    const std::string want = ReferenceStop(text, some);
    StopMatcher m(some);
    std::string got;
    bool matched = false;
    const std::string_view whole = text;
    for (size_t pos = 0; pos < text.size() && !matched;) {
      const size_t len = std::min<size_t>(1 + next() % 4, text.size() - pos);
      auto match = m.Append(whole.substr(pos, len), true, false);
      pos += len;
      if (match) {
        got += match->text;
        matched = true;
      } else {
        got += m.TakeSafe();
        ASSERT_EQ(want.compare(0, got.size(), got), 0) << text << ": leaked " << got;
      }
    }
    if (!matched) got += m.TakeAll();
    EXPECT_EQ(got, want) << "text " << text;
  }
}

}  // namespace
}  // namespace astr::front
