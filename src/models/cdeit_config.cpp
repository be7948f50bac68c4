#include "models/cdeit_config.h"

#include <sstream>

#include "core/error.h"

namespace ft {

int CDEITConfig::total_blocks() const {
  int k = 0;
  for (int s = 0; s < stages(); ++s) k += depths[static_cast<size_t>(s)] * (s + 1 < stages() ? 2 : 1);
  return k;
}

void CDEITConfig::validate() const {
  FT_USER_CHECK(patch >= 1 && patch <= 64, "--patch-size must be in [1, 64], got ", patch);
  FT_USER_CHECK(image >= 1 && image <= 8192, "--image-size must be in [1, 8192], got ", image);
  FT_USER_CHECK(image % patch == 0, "--image-size ", image, " must be a multiple of --patch-size ", patch);
  FT_USER_CHECK(in_channels >= 1 && in_channels <= 64, "CDEIT in_channels must be in [1, 64], got ", in_channels);
  FT_USER_CHECK(cond_channels >= 0 && cond_channels <= 64, "CDEIT cond_channels must be in [0, 64], got ",
                cond_channels);
  FT_USER_CHECK(heads >= 1, "CDEIT heads must be >= 1, got ", heads);
  const int S = stages();
  FT_USER_CHECK(S >= 1 && S <= 8, "CDEIT depths: 1 to 8 stages, got ", S);
  FT_USER_CHECK(widths.size() == depths.size() && windows.size() == depths.size(), "CDEIT depths (", S,
                " stages), widths (", widths.size(), ") and windows (", windows.size(), ") must have one entry a stage");
  const int64_t G = image / patch;
  FT_USER_CHECK(G % (int64_t{1} << (S - 1)) == 0, "CDEIT: the token grid ", G, " (--image-size ", image,
                " / --patch-size ", patch, ") must halve evenly ", S - 1, " times for ", S, " stages");
  FT_USER_CHECK(G * G <= (int64_t{1} << 20), "CDEIT: ", G * G, " tokens: at most 2^20");
  for (int s = 0; s < S; ++s) {
    const size_t i = static_cast<size_t>(s);
    FT_USER_CHECK(depths[i] >= 1 && depths[i] <= 256, "CDEIT depths[", s, "] must be in [1, 256], got ", depths[i]);
    // a multiple of 8: every [B, W] adaLN chunk starts 16-byte aligned in bf16 (and the
    // position table splits widths[0] into four sin/cos quarters)
    FT_USER_CHECK(widths[i] >= 8 && widths[i] % 8 == 0 && widths[i] <= 65536,
                  "CDEIT widths[", s, "] must be a multiple of 8 in [8, 65536], got ", widths[i]);
    FT_USER_CHECK(widths[i] % heads == 0, "CDEIT widths[", s, "] ", widths[i], " must be a multiple of heads ",
                  heads);
    FT_USER_CHECK(windows[i] >= 0 && (windows[i] == 0 || grid(s) % windows[i] == 0), "CDEIT windows[", s, "] ",
                  windows[i], " must be 0 (global) or divide stage ", s, "'s grid ", grid(s));
  }
  FT_USER_CHECK(shift == 0 || shift == 1, "CDEIT shift must be 0 or 1, got ", shift);
  FT_USER_CHECK(mlp_ratio >= 1 && mlp_ratio <= 16, "CDEIT mlp_ratio must be in [1, 16], got ", mlp_ratio);
  FT_USER_CHECK(freq_dim >= 2 && freq_dim % 2 == 0 && freq_dim <= 65536,
                "CDEIT freq_dim must be even and in [2, 65536], got ", freq_dim);
  FT_USER_CHECK(predict == "x0" || predict == "eps", "CDEIT predict must be x0 or eps, got '", predict, "'");
}

std::string CDEITConfig::run_name(int run) const {
  const int S = stages();
  return run < S ? "down" + std::to_string(run) : "up" + std::to_string(S - 2 - (run - S));
}

std::string CDEITConfig::describe() const {
  std::ostringstream os;
  os << "CDEIT stages=" << stages() << " depths=";
  for (size_t i = 0; i < depths.size(); ++i) os << (i ? "," : "") << depths[i];
  os << " widths=";
  for (size_t i = 0; i < widths.size(); ++i) os << (i ? "," : "") << widths[i];
  os << " windows=";
  for (size_t i = 0; i < windows.size(); ++i) os << (i ? "," : "") << windows[i];
  os << (shift ? " shifted(no mask)" : "") << " heads=" << heads << " patch=" << patch << " image=" << image << "x"
     << image << "x" << in_channels << " tokens=" << tokens() << " blocks=" << total_blocks()
     << " cond=" << (cond_channels > 0 ? "map(" + std::to_string(cond_channels) + " channels)" : std::string("none"))
     << " predict=" << predict;
  return os.str();
}

nlohmann::json CDEITConfig::to_json() const {
  return {{"arch", "cdeit"},         {"image", image},       {"patch", patch},
          {"in_channels", in_channels}, {"cond_channels", cond_channels}, {"cond_dim", 0},
          {"heads", heads},          {"depths", depths},     {"widths", widths},
          {"windows", windows},      {"shift", shift},       {"mlp_ratio", mlp_ratio},
          {"freq_dim", freq_dim},    {"predict", predict}};
}

CDEITConfig CDEITConfig::from_json(const nlohmann::json& j, const std::string& source) {
  FT_USER_CHECK(j.is_object(), source, ": model configuration is not an object");
  static const char* kKnown =
      "image, patch, in_channels, cond_channels, cond_dim (0), heads, depths, widths, windows, shift, mlp_ratio, "
      "freq_dim, predict";
  CDEITConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    if (k == "arch") continue;
    if (k == "predict") {
      FT_USER_CHECK(v.is_string(), source, ": CDEIT setting 'predict' must be a string (x0 or eps)");
      c.predict = v.get<std::string>();
      continue;
    }
    if (k == "depths" || k == "widths" || k == "windows") {
      FT_USER_CHECK(v.is_array(), source, ": CDEIT setting '", k, "' must be a list of integers, got ", v.dump());
      std::vector<int>& dst = k == "depths" ? c.depths : k == "widths" ? c.widths : c.windows;
      dst.clear();
      for (const auto& e : v) {
        FT_USER_CHECK(e.is_number_integer(), source, ": CDEIT setting '", k, "' must be a list of integers, got ",
                      v.dump());
        dst.push_back(e.get<int>());
      }
      continue;
    }
    int cond_dim = 0;
    int* field = k == "image" ? &c.image : k == "patch" ? &c.patch : k == "in_channels" ? &c.in_channels
               : k == "cond_channels" ? &c.cond_channels : k == "heads" ? &c.heads : k == "shift" ? &c.shift
               : k == "mlp_ratio" ? &c.mlp_ratio : k == "freq_dim" ? &c.freq_dim : k == "cond_dim" ? &cond_dim
               : nullptr;
    FT_USER_CHECK(field, source, ": unknown CDEIT setting '", k, "' (known: ", kKnown, ")");
    FT_USER_CHECK(v.is_number_integer(), source, ": CDEIT setting '", k, "' must be an integer, got ", v.dump());
    *field = v.get<int>();
    FT_USER_CHECK(cond_dim == 0, source, ": CDEIT takes its condition as a map (cond_channels), cond_dim must be 0");
  }
  for (const char* k : {"image", "patch", "in_channels", "cond_channels", "heads", "depths", "widths", "windows"})
    FT_USER_CHECK(j.contains(k), source, ": CDEIT configuration lacks '", k, "'");
  try {
    c.validate();
  } catch (const UserError& e) {
    throw UserError(source + ": " + e.what());
  }
  return c;
}

std::vector<CDEITBlock> cdeit_blocks(const CDEITConfig& c) {
  std::vector<CDEITBlock> v;
  const int S = c.stages();
  auto run = [&](int r, int s, bool up) {
    for (int i = 0; i < c.depths[static_cast<size_t>(s)]; ++i) {
      CDEITBlock b;
      b.run = r, b.stage = s, b.index = i, b.up = up;
      b.grid = c.grid(s);
      b.width = c.widths[static_cast<size_t>(s)];
      b.hidden_mlp = int64_t{c.mlp_ratio} * b.width;
      b.window = c.window(s);
      b.shift = (c.shift && b.window < b.grid && i % 2 == 1) ? static_cast<int>(b.window / 2) : 0;
      v.push_back(b);
    }
  };
  for (int s = 0; s < S; ++s) run(s, s, false);
  for (int s = S - 2; s >= 0; --s) run(S + (S - 2 - s), s, true);
  return v;
}

}  // namespace ft
