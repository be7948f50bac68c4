#include "models/dit_config.h"

#include <sstream>

#include "core/error.h"

namespace ft {

void DiTConfig::validate() const {
  FT_USER_CHECK(depth >= 1 && depth <= 1024, "--n-layer (DiT depth) must be in [1, 1024], got ", depth);
  FT_USER_CHECK(heads >= 1, "--n-head (DiT heads) must be >= 1, got ", heads);
  // The 2-D sin-cos position embedding splits D into four sin/cos quarters (rows and columns),
  // and a multiple of 8 starts every [B, D] adaLN chunk 16-byte aligned in bf16 (packed loads).
  FT_USER_CHECK(hidden >= 8 && hidden % 8 == 0 && hidden <= 65536,
                "--n-embd (DiT hidden width) must be a multiple of 8 in [8, 65536], got ", hidden);
  FT_USER_CHECK(hidden % heads == 0, "--n-embd ", hidden, " must be a multiple of --n-head ", heads);
  FT_USER_CHECK(patch >= 1 && patch <= 64, "--patch-size must be in [1, 64], got ", patch);
  FT_USER_CHECK(image >= 1 && image <= 8192, "--image-size must be in [1, 8192], got ", image);
  FT_USER_CHECK(image % patch == 0, "--image-size ", image, " must be a multiple of --patch-size ", patch);
  FT_USER_CHECK(tokens() <= (int64_t{1} << 20), "--image-size ", image, " / --patch-size ", patch, " gives ",
                tokens(), " tokens: at most 2^20");
  FT_USER_CHECK(in_channels >= 1 && in_channels <= 64, "DiT in_channels must be in [1, 64], got ", in_channels);
  FT_USER_CHECK(cond_channels >= 0 && cond_channels <= 64, "DiT cond_channels must be in [0, 64], got ",
                cond_channels);
  FT_USER_CHECK(cond_dim >= 0 && cond_dim <= (1 << 20), "DiT cond_dim must be in [0, 2^20], got ", cond_dim);
  FT_USER_CHECK(cond_channels == 0 || cond_dim == 0, "--cond: a DiT takes its condition as a map (cond_channels ",
                cond_channels, ") or as a vector (cond_dim ", cond_dim, "), not both");
  FT_USER_CHECK(mlp_ratio >= 1 && mlp_ratio <= 16, "DiT mlp_ratio must be in [1, 16], got ", mlp_ratio);
  FT_USER_CHECK(freq_dim >= 2 && freq_dim % 2 == 0 && freq_dim <= 65536,
                "DiT freq_dim must be even and in [2, 65536], got ", freq_dim);
  FT_USER_CHECK(predict == "x0" || predict == "eps", "DiT predict must be x0 or eps, got '", predict, "'");
}

std::string DiTConfig::describe() const {
  std::ostringstream os;
  os << "DiT L=" << depth << " D=" << hidden << " heads=" << heads << " patch=" << patch << " image=" << image
     << "x" << image << "x" << in_channels << " tokens=" << tokens();
  if (cond_channels > 0) os << " cond=map(" << cond_channels << " channels)";
  else if (cond_dim > 0) os << " cond=vector(" << cond_dim << ")";
  else os << " cond=none";
  os << " predict=" << predict;
  return os.str();
}

nlohmann::json DiTConfig::to_json() const {
  return {{"arch", "dit"},         {"depth", depth},         {"hidden", hidden},
          {"heads", heads},        {"patch", patch},         {"image", image},
          {"in_channels", in_channels}, {"cond_channels", cond_channels}, {"cond_dim", cond_dim},
          {"mlp_ratio", mlp_ratio}, {"freq_dim", freq_dim},  {"predict", predict}};
}

DiTConfig DiTConfig::from_json(const nlohmann::json& j, const std::string& source) {
  FT_USER_CHECK(j.is_object(), source, ": model configuration is not an object");
  static const char* kKnown =
      "depth, hidden, heads, patch, image, in_channels, cond_channels, cond_dim, mlp_ratio, freq_dim, predict";
  DiTConfig c;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "arch") continue;
    if (k == "predict") {
      FT_USER_CHECK(it.value().is_string(), source, ": DiT setting 'predict' must be a string (x0 or eps)");
      c.predict = it.value().get<std::string>();
      continue;
    }
    int* field = k == "depth" ? &c.depth : k == "hidden" ? &c.hidden : k == "heads" ? &c.heads
               : k == "patch" ? &c.patch : k == "image" ? &c.image : k == "in_channels" ? &c.in_channels
               : k == "cond_channels" ? &c.cond_channels : k == "cond_dim" ? &c.cond_dim
               : k == "mlp_ratio" ? &c.mlp_ratio : k == "freq_dim" ? &c.freq_dim : nullptr;
    FT_USER_CHECK(field, source, ": unknown DiT setting '", k, "' (known: ", kKnown, ")");
    FT_USER_CHECK(it.value().is_number_integer(), source, ": DiT setting '", k, "' must be an integer, got ",
                  it.value().dump());
    *field = it.value().get<int>();
  }
  for (const char* k : {"depth", "hidden", "heads", "patch", "image", "in_channels", "cond_channels", "cond_dim"})
    FT_USER_CHECK(j.contains(k), source, ": DiT configuration lacks '", k, "'");
  try {
    c.validate();
  } catch (const UserError& e) {
    throw UserError(source + ": " + e.what());
  }
  return c;
}

const std::vector<double>& diffusion_alpha_bars() {
  static const std::vector<double> ab = [] {
    std::vector<double> a(kDiffusionSteps);
    double prod = 1.0;
    for (int t = 0; t < kDiffusionSteps; ++t) {
      // np.linspace(1e-4, 0.02, 1000, dtype=float64), as DiT's get_beta_schedule("linear")
      const double beta = 1e-4 + (0.02 - 1e-4) * static_cast<double>(t) / (kDiffusionSteps - 1);
      prod *= 1.0 - beta;
      a[static_cast<size_t>(t)] = prod;
    }
    return a;
  }();
  return ab;
}

}  // namespace ft
