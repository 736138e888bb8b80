// NcclUniqueIdFromPickle against what CPython's pickle writes for vLLM's ncclUniqueId (a ctypes
// structure with one c_byte * 128 field, as vllm/distributed/device_communicators/
// pynccl_wrapper.py declares it). The pickles below are pickle.dumps output of CPython 3.11.7 for
// internal[i] = (i * 37 + 11) % 256 - 128, made by this script:
//
//   import ctypes, pickle
//   class ncclUniqueId(ctypes.Structure):
//       _fields_ = [("internal", ctypes.c_byte * 128)]
//   class Other(ctypes.Structure):
//       _fields_ = [("internal", ctypes.c_byte * 128)]
//   u = ncclUniqueId(); o = Other()
//   for i in range(128): u.internal[i] = o.internal[i] = (i * 37 + 11) % 256 - 128
//   pickle.dumps(u, protocol=P).hex()        # P = 2, 3, 4, 5
//   pickle.dumps(o, protocol=4).hex()        # kOtherClass
//   pickle.dumps([u, ncclUniqueId()], protocol=4).hex()   # kTwoIds
#include "scheduler/front/torch_rendezvous.h"

#include <gtest/gtest.h>

#include <string>

namespace astr::front {
namespace {

constexpr const char* kProtocol3 =
    "8003635f6374797065730a5f756e7069636b6c650a7100635f5f6d61696e5f5f0a6e63636c556e6971756549"
    "640a71017d710243808bb0d5fa1f44698eb3d8fd22476c91b6db00254a6f94b9de03284d7297bce1062b5075"
    "9abfe4092e53789dc2e70c31567ba0c5ea0f34597ea3c8ed12375c81a6cbf0153a5f84a9cef3183d6287acd1"
    "f61b40658aafd4f91e43688db2d7fc21466b90b5daff24496e93b8dd02274c7196bbe0052a4f7499bee3082d"
    "52779cc1e671038671048671055271062e";
constexpr const char* kProtocol4 =
    "800495c0000000000000008c075f637479706573948c095f756e7069636b6c659493948c085f5f6d61696e5f"
    "5f948c0c6e63636c556e6971756549649493947d9443808bb0d5fa1f44698eb3d8fd22476c91b6db00254a6f"
    "94b9de03284d7297bce1062b50759abfe4092e53789dc2e70c31567ba0c5ea0f34597ea3c8ed12375c81a6cb"
    "f0153a5f84a9cef3183d6287acd1f61b40658aafd4f91e43688db2d7fc21466b90b5daff24496e93b8dd0227"
    "4c7196bbe0052a4f7499bee3082d52779cc1e6948694869452942e";
constexpr const char* kProtocol5 =
    "800595c0000000000000008c075f637479706573948c095f756e7069636b6c659493948c085f5f6d61696e5f"
    "5f948c0c6e63636c556e6971756549649493947d9443808bb0d5fa1f44698eb3d8fd22476c91b6db00254a6f"
    "94b9de03284d7297bce1062b50759abfe4092e53789dc2e70c31567ba0c5ea0f34597ea3c8ed12375c81a6cb"
    "f0153a5f84a9cef3183d6287acd1f61b40658aafd4f91e43688db2d7fc21466b90b5daff24496e93b8dd0227"
    "4c7196bbe0052a4f7499bee3082d52779cc1e6948694869452942e";
constexpr const char* kProtocol2 =
    "8002635f6374797065730a5f756e7069636b6c650a7100635f5f6d61696e5f5f0a6e63636c556e6971756549"
    "640a71017d7102635f636f646563730a656e636f64650a710358c1000000c28bc2b0c395c3ba1f4469c28ec2"
    "b3c398c3bd22476cc291c2b6c39b00254a6fc294c2b9c39e03284d72c297c2bcc3a1062b5075c29ac2bfc3a4"
    "092e5378c29dc382c3a70c31567bc2a0c385c3aa0f34597ec2a3c388c3ad12375cc281c2a6c38bc3b0153a5f"
    "c284c2a9c38ec3b3183d62c287c2acc391c3b61b4065c28ac2afc394c3b91e4368c28dc2b2c397c3bc21466b"
    "c290c2b5c39ac3bf24496ec293c2b8c39d02274c71c296c2bbc3a0052a4f74c299c2bec3a3082d5277c29cc3"
    "81c3a6710458060000006c6174696e31710586710652710786710886710952710a2e";
constexpr const char* kOtherClass =
    "800495b9000000000000008c075f637479706573948c095f756e7069636b6c659493948c085f5f6d61696e5f"
    "5f948c054f746865729493947d9443808bb0d5fa1f44698eb3d8fd22476c91b6db00254a6f94b9de03284d72"
    "97bce1062b50759abfe4092e53789dc2e70c31567ba0c5ea0f34597ea3c8ed12375c81a6cbf0153a5f84a9ce"
    "f3183d6287acd1f61b40658aafd4f91e43688db2d7fc21466b90b5daff24496e93b8dd02274c7196bbe0052a"
    "4f7499bee3082d52779cc1e6948694869452942e";
constexpr const char* kTwoIds =
    "80049553010000000000005d94288c075f637479706573948c095f756e7069636b6c659493948c085f5f6d61"
    "696e5f5f948c0c6e63636c556e6971756549649493947d9443808bb0d5fa1f44698eb3d8fd22476c91b6db00"
    "254a6f94b9de03284d7297bce1062b50759abfe4092e53789dc2e70c31567ba0c5ea0f34597ea3c8ed12375c"
    "81a6cbf0153a5f84a9cef3183d6287acd1f61b40658aafd4f91e43688db2d7fc21466b90b5daff24496e93b8"
    "dd02274c7196bbe0052a4f7499bee3082d52779cc1e694869486945294680368067d94438000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
    "00000000000000000000000000000000000000000000000000000000000000000094869486945294652e";

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// The id's bytes as the script sets them (c_byte values stored as two's complement).
std::string ExpectedId() {
  std::string id;
  for (int i = 0; i < 128; ++i) id.push_back(static_cast<char>((i * 37 + 11) % 256 - 128));
  return id;
}

TEST(NcclUniqueIdFromPickle, ReadsTheIdFromProtocols3To5) {
  for (const char* hex : {kProtocol3, kProtocol4, kProtocol5}) {
    auto id = NcclUniqueIdFromPickle(FromHex(hex));
    ASSERT_TRUE(id.ok()) << id.status().message();
    EXPECT_EQ(*id, ExpectedId());
  }
}

TEST(NcclUniqueIdFromPickle, RefusesWhatIsNotOneUniqueId) {
  const std::string p4 = FromHex(kProtocol4);
  struct Case {
    std::string bytes;
    std::string says;
  };
  const Case cases[] = {
      // Protocol 2 writes bytes as a latin-1 string through _codecs.encode.
      {FromHex(kProtocol2), "0 byte strings of 128 bytes"},
      {FromHex(kOtherClass), "no class named ncclUniqueId"},
      {FromHex(kTwoIds), "2 byte strings of 128 bytes"},
      {p4.substr(0, p4.size() - 1), "no STOP"},
      {p4.substr(0, 80), "truncated"},
      {"", "protocol 2+ header"},
      {std::string("\x80\x04\x95\x01\x00\x00\x00\x00\x00\x00\x00\x7f.", 13),
       "pickle opcode 0x7f at byte 11"},
  };
  for (const Case& c : cases) {
    auto id = NcclUniqueIdFromPickle(c.bytes);
    ASSERT_FALSE(id.ok()) << c.says;
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(id.status().message()).find(c.says), std::string::npos)
        << id.status().message();
  }
}

}  // namespace
}  // namespace astr::front
