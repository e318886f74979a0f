#pragma once

// PUB events of protocol version 1. Each event is two frames: the topic
// "<project>.<event type>" and the envelope {"v": 1, "type", "body"}.
// Subscribers subscribe to "<project>." for all events of a project (project
// names hold no dots). Plain data; thread-safe functions.

#include "net/wire/envelope.h"
#include "net/wire/messages_common.h"

#include <utility>

namespace crowdtrain::net {

struct RoundClosedEvent {
    static constexpr std::string_view kType = "round_closed";
    uint64_t round = 0; // the round that closed
    uint64_t version = 0; // the new version (theta_v after the round's update)
    std::optional<double> trainLoss; // token-weighted mean of the accepted submissions
    std::optional<double> valLoss;
    uint64_t tokens = 0; // tokens of the round's accepted submissions
    uint64_t accepted = 0;
    uint64_t rejected = 0;
    uint64_t volunteers = 0; // online at the close
    void write(MapWriter& w) const;
    static RoundClosedEvent read(MapView v);
    bool operator==(const RoundClosedEvent&) const = default;
};

// The open round has handed out all its work and a volunteer that delivered
// is asking for more: volunteers holding its tasks should stop at their
// next step and submit what they trained, so that nobody waits for the
// slowest.
struct RoundWrapUpEvent {
    static constexpr std::string_view kType = "round_wrap_up";
    uint64_t round = 0; // the open round
    uint64_t version = 0; // its tasks start from this version (= round - 1)
    void write(MapWriter& w) const;
    static RoundWrapUpEvent read(MapView v);
    bool operator==(const RoundWrapUpEvent&) const = default;
};

// theta_version is committed and served (state and update resources),
// before its validation: volunteers waiting for the round to close go on.
struct VersionPublishedEvent {
    static constexpr std::string_view kType = "version_published";
    uint64_t version = 0;
    void write(MapWriter& w) const;
    static VersionPublishedEvent read(MapView v);
    bool operator==(const VersionPublishedEvent&) const = default;
};

struct CheckpointPublishedEvent {
    static constexpr std::string_view kType = "checkpoint_published";
    CheckpointInfo checkpoint;
    void write(MapWriter& w) const;
    static CheckpointPublishedEvent read(MapView v);
    bool operator==(const CheckpointPublishedEvent&) const = default;
};

struct EventFrames {
    std::string topic;
    std::string body;
};

std::string eventTopic(std::string_view project, std::string_view type);

template <typename E> EventFrames encodeEvent(std::string_view project, const E& event)
{
    MapWriter body;
    event.write(body);
    return {eventTopic(project, E::kType), encodeEnvelope(E::kType, 0, body, EnvelopeKind::Event)};
}

struct DecodedEvent {
    std::string project;
    Envelope envelope;
};

// Checks the topic ("<project>.<type>", a known type) against the body's type.
Result<DecodedEvent> decodeEventFrames(std::string_view topic, std::string_view body);

template <typename E> Result<E> decodeEvent(const DecodedEvent& event)
{
    return decodeBody<E>(event.envelope);
}

} // namespace crowdtrain::net
