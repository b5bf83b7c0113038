#include "autograd/grad_mode.h"

namespace tg {
namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly = false;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool on) { t_grad_enabled = on; }
bool anomaly_enabled() { return t_anomaly; }
void set_anomaly_enabled(bool on) { t_anomaly = on; }

}  // namespace tg
