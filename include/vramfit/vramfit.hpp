#pragma once
/// @file vramfit.hpp
/// The umbrella header: everything that needs only the standard library and fmt. Not included
/// here: vramfit/config_json.hpp (needs nlohmann-json) and vramfit/probe.hpp (needs LibTorch).

#include "vramfit/alloc_conf.hpp"
#include "vramfit/bytes.hpp"
#include "vramfit/error.hpp"
#include "vramfit/format.hpp"
#include "vramfit/model.hpp"
#include "vramfit/phase.hpp"
#include "vramfit/predictor.hpp"
#include "vramfit/presets.hpp"
#include "vramfit/profiles.hpp"
#include "vramfit/sharding.hpp"
#include "vramfit/step.hpp"
#include "vramfit/terms.hpp"
