// The model layer: modules, the transformer, optimizers, checkpoints, data and decoding.
#pragma once
#include "models/checkpoint.h"
#include "models/data.h"
#include "models/distributed_data_parallel.h"
#include "models/generate.h"
#include "models/grad_scaler.h"
#include "models/layers.h"
#include "models/module.h"
#include "models/optim.h"
#include "models/safetensors.h"
#include "models/train.h"
#include "models/training_checkpoint.h"
#include "models/transformer.h"
