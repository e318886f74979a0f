#include "net/wire/events.h"

#include "net/wire/error_codes.h"
#include "net/wire/limits.h"

namespace crowdtrain::net {

void RoundClosedEvent::write(MapWriter& w) const
{
    w.u64("round", round).u64("version", version).optF64("train_loss", trainLoss).optF64("val_loss", valLoss);
    w.u64("tokens", tokens).u64("accepted", accepted).u64("rejected", rejected).u64("volunteers", volunteers);
}

RoundClosedEvent RoundClosedEvent::read(MapView v)
{
    RoundClosedEvent e;
    e.round = v.u64("round");
    e.version = v.u64("version");
    e.trainLoss = v.optF64("train_loss", 0, 1e6);
    e.valLoss = v.optF64("val_loss", 0, 1e6);
    e.tokens = v.u64("tokens");
    e.accepted = v.u64("accepted");
    e.rejected = v.u64("rejected");
    e.volunteers = v.u64("volunteers");
    return e;
}

void RoundWrapUpEvent::write(MapWriter& w) const
{
    w.u64("round", round).u64("version", version);
}

RoundWrapUpEvent RoundWrapUpEvent::read(MapView v)
{
    RoundWrapUpEvent e;
    e.round = v.u64("round", 1, UINT64_MAX);
    e.version = v.u64("version");
    if (!v.context().failed() && e.version + 1 != e.round)
        v.fail("version", "must be round - 1");
    return e;
}

void VersionPublishedEvent::write(MapWriter& w) const
{
    w.u64("version", version);
}

VersionPublishedEvent VersionPublishedEvent::read(MapView v)
{
    return {v.u64("version", 1, UINT64_MAX)};
}

void CheckpointPublishedEvent::write(MapWriter& w) const
{
    w.map("checkpoint", mapOf(checkpoint));
}

CheckpointPublishedEvent CheckpointPublishedEvent::read(MapView v)
{
    return {CheckpointInfo::read(v.map("checkpoint"))};
}

std::string eventTopic(std::string_view project, std::string_view type)
{
    return std::string(project) + "." + std::string(type);
}

Result<DecodedEvent> decodeEventFrames(std::string_view topic, std::string_view body)
{
    if (topic.size() > kMaxTopicBytes)
        return Error::make(errc::kTooLarge, "event topic of " + std::to_string(topic.size()) + " bytes");
    const std::size_t dot = topic.find('.');
    if (dot == std::string_view::npos || !isProjectName(topic.substr(0, dot)))
        return Error::make(errc::kMalformed, "event topic \"" + std::string(topic) + "\" is not <project>.<event>");
    auto envelope = decodeEnvelope(body, EnvelopeKind::Event);
    if (!envelope)
        return envelope.error();
    if (topic.substr(dot + 1) != envelope->type)
        return Error::make(errc::kMalformed,
            "event topic \"" + std::string(topic) + "\" does not match type \"" + envelope->type + "\"");
    return DecodedEvent{std::string(topic.substr(0, dot)), std::move(*envelope)};
}

} // namespace crowdtrain::net
