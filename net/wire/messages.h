#pragma once

// All messages of protocol version 1 (docs/protocol.md is the contract).
// Encode with encodeRequest/encodeReply/encodeEvent, decode with
// decodeRequest/decodeReply/decodeEnvelope + decodeBody (envelope.h).

#include "net/wire/envelope.h"
#include "net/wire/events.h"
#include "net/wire/limits.h"
#include "net/wire/messages_common.h"
#include "net/wire/messages_resource.h"
#include "net/wire/messages_session.h"
#include "net/wire/messages_stats.h"
#include "net/wire/messages_submit.h"
