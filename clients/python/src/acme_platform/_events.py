"""Events: their types, the feed (``GET /v1/events``) and the live stream
(``GET /v1/events/stream``, Server-Sent Events)."""

from __future__ import annotations

import codecs
import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Final,
    Iterator,
    List,
    Literal,
    Optional,
    TypedDict,
    Union,
    cast,
)

from ._errors import ClientError, TransportError
from ._types import Conversation, Message

#: The types of events.
EVENT_CONVERSATION_CREATED: Final = "conversation.created"
EVENT_CONVERSATION_UPDATED: Final = "conversation.updated"
EVENT_PARTICIPANT_ADDED: Final = "conversation.participant_added"
EVENT_PARTICIPANT_REMOVED: Final = "conversation.participant_removed"
EVENT_MESSAGE_CREATED: Final = "message.created"


class ConversationChanges(TypedDict, total=False):
    """The fields a ``conversation.updated`` changed, each with its value
    before the change."""

    subject: str
    status: str


class ConversationData(TypedDict):
    """The data of ``conversation.created``: the conversation as created."""

    conversation: Conversation


class ConversationUpdatedData(TypedDict):
    """The data of ``conversation.updated``."""

    conversation: Conversation
    changes: ConversationChanges


class ParticipantData(TypedDict):
    """The data of ``conversation.participant_added`` and ``_removed``."""

    conversation: Conversation
    #: The user added or removed.
    userId: str


class MessageCreatedData(TypedDict):
    """The data of ``message.created``: the message, and the conversation
    after it."""

    conversation: Conversation
    message: Message


class ConversationCreatedEvent(TypedDict):
    """A conversation was created. Every event has ``id`` (``evt_...``),
    ``type``, ``sequence`` (the account's order; gaps allowed),
    ``timestamp`` (RFC 3339 UTC, when the change happened) and ``data``."""

    id: str
    type: Literal["conversation.created"]
    sequence: int
    timestamp: str
    data: ConversationData


class ConversationUpdatedEvent(TypedDict):
    """``subject`` or ``status`` changed: ``data["changes"]``."""

    id: str
    type: Literal["conversation.updated"]
    sequence: int
    timestamp: str
    data: ConversationUpdatedData


class ParticipantAddedEvent(TypedDict):
    """A participant was added: ``data["userId"]``."""

    id: str
    type: Literal["conversation.participant_added"]
    sequence: int
    timestamp: str
    data: ParticipantData


class ParticipantRemovedEvent(TypedDict):
    """A participant was removed: ``data["userId"]``."""

    id: str
    type: Literal["conversation.participant_removed"]
    sequence: int
    timestamp: str
    data: ParticipantData


class MessageCreatedEvent(TypedDict):
    """A message was posted: ``data["message"]``."""

    id: str
    type: Literal["message.created"]
    sequence: int
    timestamp: str
    data: MessageCreatedData


#: An event of the feed or the stream; ``if event["type"] == ...`` narrows
#: it. Fields may be added in later versions, never removed.
Event = Union[
    ConversationCreatedEvent,
    ConversationUpdatedEvent,
    ParticipantAddedEvent,
    ParticipantRemovedEvent,
    MessageCreatedEvent,
]


@dataclass(frozen=True)
class SseMessage:
    """One message of an event stream: ``id`` is the last event ID after
    it, ``event`` its type (``message`` when the block named none),
    ``data`` its data lines joined by newlines."""

    id: str
    event: str
    data: str


class SseParser:
    """An incremental parser of ``text/event-stream`` (HTML standard,
    9.2.6): feed it text as it arrives, in chunks of any size. Lines end with
    CRLF, LF or CR; lines starting with ``:`` are comments; a value loses one
    leading space; ``retry:`` with digits only sets :attr:`retry`
    (milliseconds); an ``id`` containing NUL is ignored; a block without
    data dispatches nothing."""

    def __init__(self, last_event_id: str = "") -> None:
        self.last_event_id = last_event_id
        self.retry: Optional[int] = None
        self._id = last_event_id
        self._line: List[str] = []
        self._skip_lf = False
        self._data: List[str] = []
        self._event = ""

    def push(self, chunk: str) -> List[SseMessage]:
        """Parses the next chunk; returns the messages it completes."""
        out: List[SseMessage] = []
        start = 0
        for i, c in enumerate(chunk):
            if c == "\n" and self._skip_lf:
                self._skip_lf = False
                start = i + 1
                continue
            self._skip_lf = False
            if c not in "\r\n":
                continue
            self._line.append(chunk[start:i])
            self._skip_lf = c == "\r"
            start = i + 1
            line = "".join(self._line)
            self._line = []
            message = self._process(line)
            if message is not None:
                out.append(message)
        self._line.append(chunk[start:])
        return out

    def _process(self, line: str) -> Optional[SseMessage]:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self._id = value
        elif field == "retry":
            if value.isdigit() and value.isascii():
                self.retry = int(value)
        return None

    def _dispatch(self) -> Optional[SseMessage]:
        self.last_event_id = self._id
        data, event = self._data, self._event or "message"
        self._data, self._event = [], ""
        if not data:
            return None
        return SseMessage(self.last_event_id, event, "\n".join(data))


@dataclass(frozen=True)
class EventPage:
    """One page of the event feed."""

    #: The events visible to the caller, oldest first.
    items: List[Event]
    #: The absolute URL of the next page (``Link: rel="next"``).
    next_url: Optional[str]
    #: The position to continue from: the ``after`` of ``next_url``, the
    #: highest ``sequence`` the service examined for the caller (it may be
    #: past the last item: events the caller may not see, or filtered out).
    position: Optional[int]


def position_of(next_url: Optional[str]) -> Optional[int]:
    """The ``after`` a next link names, if it names one."""
    if next_url is None:
        return None
    values = urllib.parse.parse_qs(urllib.parse.urlsplit(next_url).query).get("after", [])
    return int(values[0]) if values and values[0].isdigit() and values[0].isascii() else None


def check_position(after: Optional[int]) -> None:
    """A stored position is a sequence: a whole number, not negative."""
    if after is not None and (isinstance(after, bool) or not isinstance(after, int) or after < 0):
        raise ValueError("after must be a sequence: a whole number, not negative")


#: The page size of the feed when none is given.
DEFAULT_EVENT_PAGE_SIZE = 100


class EventFeed:
    """The caller's event feed from a position. Each ``for`` over it reads
    the events after :attr:`position`, page after page by the ``Link:
    rel="next"`` of each, until the service has nothing more ready (a page
    that is not full, or does not move the position on), and moves the
    position on as the loop
    goes: store it after handling an event and give it as ``after`` next
    time, or iterate the same feed again later."""

    def __init__(
        self,
        after: Optional[int],
        page_size: int,
        first_url: Callable[[Optional[int]], str],
        read_page: Callable[[str], EventPage],
    ) -> None:
        self._position = after
        self._page_size = page_size
        self._first_url = first_url
        self._read_page = read_page

    @property
    def position(self) -> Optional[int]:
        """The position after the events handled so far: the ``sequence``
        of the last event the loop received or, once a page is done, the
        position its next link names; ``None`` before anything was read
        without ``after``."""
        return self._position

    def __iter__(self) -> Iterator[Event]:
        url = self._first_url(self._position)
        while True:
            before = self._position
            page = self._read_page(url)
            for event in page.items:
                yield event
                self._position = event["sequence"]
            if page.position is not None:
                self._position = page.position
            # A full page means more are ready now; anything less, that the
            # feed is read up to the newest event the caller may see.
            full = len(page.items) >= self._page_size
            if (
                not full
                or page.next_url is None
                or (before is not None and page.position == before)
            ):
                return
            url = page.next_url


#: How long a stream may stay silent before it counts as dropped: the
#: service sends a comment at least every 15 s.
STREAM_READ_TIMEOUT = 60.0

#: Opens one connection of the stream, after the last event id when given.
StreamOpener = Callable[[Optional[str]], http.client.HTTPResponse]


class EventStream:
    """The caller's live stream of events (``GET /v1/events/stream``,
    Server-Sent Events). A ``for`` over it blocks until each event arrives,
    for as long as the loop runs; when the connection ends (the bearer
    token expired, the replica shut down) or drops, it connects again with
    a fresh token and ``Last-Event-ID`` set to the last id received, so no
    event is lost or repeated. Leaving the loop closes the connection."""

    def __init__(self, open_stream: StreamOpener, max_retries: int, max_retry_wait: float) -> None:
        self._open = open_stream
        self._max_retries = max_retries
        self._max_retry_wait = max_retry_wait
        self._last_event_id: Optional[str] = None
        self._connections = 0

    @property
    def last_event_id(self) -> Optional[str]:
        """The id of the last event received, ``None`` before the first."""
        return self._last_event_id

    @property
    def position(self) -> Optional[int]:
        """The ``sequence`` of the last event received, to store and
        resume from (``after``)."""
        got = self._last_event_id
        return int(got) if got is not None and got.isdigit() and got.isascii() else None

    @property
    def connections(self) -> int:
        """How many connections the stream has opened."""
        return self._connections

    def __iter__(self) -> Iterator[Event]:
        silent = 0  # connections in a row that ended without sending anything
        retry_ms: Optional[int] = None
        while True:
            resp = self._open(self._last_event_id)
            self._connections += 1
            dropped: Optional[BaseException] = None
            heard = False
            try:
                media_type = (resp.getheader("Content-Type") or "").split(";")[0].strip().lower()
                if media_type != "text/event-stream":
                    raise ClientError(
                        "acme_platform: GET /v1/events/stream: want text/event-stream, "
                        f"got {media_type or 'nothing'}"
                    )
                parser = SseParser(self._last_event_id or "")
                decoder = codecs.getincrementaldecoder("utf-8")("replace")
                while True:
                    try:
                        chunk = resp.read1(65536)
                    except (OSError, http.client.HTTPException) as err:
                        dropped = err
                        break
                    if not chunk:
                        break
                    heard = True
                    for message in parser.push(decoder.decode(chunk)):
                        event = _parse_event(message.data)
                        self._last_event_id = message.id
                        yield event
                    if parser.last_event_id:
                        self._last_event_id = parser.last_event_id
                    if parser.retry is not None:
                        retry_ms = parser.retry
            finally:
                resp.close()
            silent = 0 if heard else silent + 1
            if silent > self._max_retries:
                raise TransportError(
                    "GET",
                    "/v1/events/stream",
                    _reason(dropped)
                    if dropped is not None
                    else f"the stream ended {silent} times in a row without sending anything",
                )
            wait = (retry_ms or 0) / 1000 if silent == 0 else 0.25 * 2 ** (silent - 1)
            time.sleep(min(wait, self._max_retry_wait))


def _reason(err: BaseException) -> str:
    return type(err).__name__ + (f": {err}" if str(err) else "")


def _parse_event(data: str) -> Event:
    try:
        event: Any = json.loads(data)
    except ValueError:
        raise ClientError("acme_platform: the event stream sent data that is not JSON") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise ClientError("acme_platform: the event stream sent data that is not an event")
    return cast(Event, event)


def events_query(
    after: Union[int, str, None], limit: Optional[int], types: Optional[List[str]]
) -> Dict[str, str]:
    """The query of the feed or the stream."""
    query: Dict[str, str] = {}
    if after is not None:
        query["after"] = str(after)
    if limit is not None:
        query["limit"] = str(limit)
    if types:
        query["types"] = ",".join(types)
    return query
