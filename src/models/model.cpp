// Model's shared checks (models/model.h).
#include "models/model.h"

#include "core/error.h"

namespace ft {

void Model::check_ops_supported(const Backend& be, Precision p, const std::string& what) const {
  PlanShape one;
  one.training = false;
  for (const OpShape& op : ops(one)) {
    const std::string why = be.unsupported(op, p);
    FT_USER_CHECK(why.empty(), what, why);
  }
}

}  // namespace ft
