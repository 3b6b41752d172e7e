<?php

declare(strict_types=1);

namespace Acme\Platform\Events;

use Acme\Platform\ClientException;

/**
 * An event of the feed or the stream: one change of a conversation.
 * Each of the five types has a class of its own, which
 * adds what its data carries; a type this version does not know comes as an
 * Event. The shape is versioned with the API: fields may be added, never
 * removed; $data holds the event's whole data as received.
 *
 * @phpstan-import-type Conversation from \Acme\Platform\Client
 */
class Event
{
    public const CONVERSATION_CREATED = 'conversation.created';
    public const CONVERSATION_UPDATED = 'conversation.updated';
    public const PARTICIPANT_ADDED = 'conversation.participant_added';
    public const PARTICIPANT_REMOVED = 'conversation.participant_removed';
    public const MESSAGE_CREATED = 'message.created';

    /** The class of each type. */
    private const CLASSES = [
        self::CONVERSATION_CREATED => ConversationCreated::class,
        self::CONVERSATION_UPDATED => ConversationUpdated::class,
        self::PARTICIPANT_ADDED => ParticipantAdded::class,
        self::PARTICIPANT_REMOVED => ParticipantRemoved::class,
        self::MESSAGE_CREATED => MessageCreated::class,
    ];

    /**
     * @param string               $id           evt_…, unique
     * @param string               $type         one of the constants
     * @param int                  $sequence     the account's order of events (gaps allowed)
     * @param string               $timestamp    when the change happened, RFC 3339 UTC with milliseconds
     * @param array<string, mixed> $conversation the conversation after the change (Conversation)
     * @param array<string, mixed> $data         the event's data as received
     */
    final public function __construct(
        public readonly string $id,
        public readonly string $type,
        public readonly int $sequence,
        public readonly string $timestamp,
        public readonly array $conversation,
        public readonly array $data,
    ) {
    }

    /**
     * The event of a decoded JSON object, as the class of its type.
     *
     * @param mixed $event the decoded JSON (associative arrays)
     */
    public static function fromArray(mixed $event): self
    {
        if (
            !is_array($event) || !is_string($event['id'] ?? null) || !is_string($event['type'] ?? null)
            || !is_int($event['sequence'] ?? null) || !is_string($event['timestamp'] ?? null)
            || !is_array($event['data'] ?? null) || !is_array($event['data']['conversation'] ?? null)
        ) {
            throw new ClientException('acme/platform: an event without id, type, sequence, timestamp or data');
        }
        $class = self::CLASSES[$event['type']] ?? self::class;
        return new $class(
            $event['id'],
            $event['type'],
            $event['sequence'],
            $event['timestamp'],
            $event['data']['conversation'],
            $event['data'],
        );
    }
}
