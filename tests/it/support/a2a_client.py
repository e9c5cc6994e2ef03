"""Drives `agdx bridge a2a` with the official A2A Python SDK's client.

Run by tests/it/bridge_a2a.rs: `python3 a2a_client.py BRIDGE_URL STEP ARGS...`
prints one JSON object (what the SDK saw) and exits 0; an A2A error the SDK
raised is printed as {"error": class name, "message": ...}.

Steps:
  agents                         GET /agents, then each card through the SDK's resolver
  send AGENT TEXT [SKILL]        SendMessage (blocking): the task it returns
  stream AGENT TEXT [SKILL]      SendStreamingMessage: every event, in order
  get AGENT TASK                 GetTask
  cancel AGENT TASK              CancelTask
  input AGENT TEXT ANSWER        SendMessage until input-required, then the answer
  input_stream AGENT TEXT ANSWER the same, both messages streamed
  legacy AGENT TEXT              send, stream and get through the SDK's 0.3 compatibility transport
"""

import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf import json_format

from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)


def state(value):
    return TaskState.Name(value)


def texts(parts):
    return "".join(p.text for p in parts if p.HasField("text"))


def task_json(task):
    return {
        "id": task.id,
        "context_id": task.context_id,
        "state": state(task.status.state),
        "status_text": texts(task.status.message.parts),
        "artifacts": [
            {"id": a.artifact_id, "text": texts(a.parts)} for a in task.artifacts
        ],
    }


def message(text, skill=None, task_id=None, context_id=None):
    msg = Message(
        message_id=str(uuid.uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
    )
    if skill:
        msg.metadata.update({"skill": skill})
    if task_id:
        msg.task_id = task_id
    if context_id:
        msg.context_id = context_id
    return SendMessageRequest(message=msg)


async def client_for(base, agent, streaming=True, legacy=False):
    url = f"{base}/agents/{agent}"
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, url).get_agent_card()
    if legacy:
        # Keep only the 0.3 interface: the factory then picks its
        # compatibility transport, which speaks the 0.3 method names.
        keep = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
        del card.supported_interfaces[:]
        card.supported_interfaces.extend(keep)
    factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=httpx.AsyncClient(timeout=60)))
    return factory.create(card)


async def first_task(client, request):
    async for event in client.send_message(request):
        if event.HasField("task"):
            return event.task
    raise RuntimeError("no task in the response")


async def step(base, name, args):
    if name == "agents":
        async with httpx.AsyncClient() as http:
            listed = (await http.get(f"{base}/agents")).json()
            cards = []
            for entry in listed["agents"]:
                agent = entry["supportedInterfaces"][0]["url"].rstrip("/").rsplit("/", 1)[1]
                card = await A2ACardResolver(http, f"{base}/agents/{agent}").get_agent_card()
                cards.append(
                    {
                        "agent": agent,
                        "name": card.name,
                        "skills": [s.id for s in card.skills],
                        "streaming": card.capabilities.streaming,
                        "push": card.capabilities.push_notifications,
                        "interfaces": [
                            [i.url, i.protocol_binding, i.protocol_version]
                            for i in card.supported_interfaces
                        ],
                    }
                )
            missing = await http.get(f"{base}/agents/nobody/.well-known/agent-card.json")
        return {"cards": cards, "missing_card_status": missing.status_code}
    if name == "send":
        agent, text, *skill = args
        client = await client_for(base, agent, streaming=False)
        return task_json(await first_task(client, message(text, *skill)))
    if name == "legacy":
        agent, text = args
        client = await client_for(base, agent, streaming=False, legacy=True)
        sent = task_json(await first_task(client, message(text)))
        streaming = await client_for(base, agent, streaming=True, legacy=True)
        states, pieces = [], []
        async for event in streaming.send_message(message(text)):
            if event.HasField("task"):
                states.append(state(event.task.status.state))
            elif event.HasField("status_update"):
                states.append(state(event.status_update.status.state))
            elif event.HasField("artifact_update"):
                pieces.append(texts(event.artifact_update.artifact.parts))
        got = task_json(await streaming.get_task(GetTaskRequest(id=sent["id"])))
        return {"sent": sent, "streamed": {"states": states, "pieces": pieces}, "got": got}
    if name == "stream":
        agent, text, *skill = args
        client = await client_for(base, agent, streaming=True)
        events = []
        async for event in client.send_message(message(text, *skill)):
            if event.HasField("task"):
                events.append({"task": task_json(event.task)})
            elif event.HasField("status_update"):
                update = event.status_update
                events.append(
                    {
                        "status": state(update.status.state),
                        "text": texts(update.status.message.parts),
                        "task": update.task_id,
                    }
                )
            elif event.HasField("artifact_update"):
                update = event.artifact_update
                events.append(
                    {
                        "artifact": texts(update.artifact.parts),
                        "append": update.append,
                        "last": update.last_chunk,
                        "task": update.task_id,
                    }
                )
        return {"events": events}
    if name == "input_stream":
        agent, text, answer = args
        client = await client_for(base, agent, streaming=True)
        asked, answered, task_id, context_id = [], [], None, None
        async for event in client.send_message(message(text)):
            if event.HasField("task"):
                task_id, context_id = event.task.id, event.task.context_id
            elif event.HasField("status_update"):
                update = event.status_update
                asked.append([state(update.status.state), texts(update.status.message.parts)])
        follow_up = message(answer, task_id=task_id, context_id=context_id)
        async for event in client.send_message(follow_up):
            if event.HasField("status_update"):
                answered.append([state(event.status_update.status.state), event.status_update.task_id])
            elif event.HasField("artifact_update"):
                answered.append(["artifact", texts(event.artifact_update.artifact.parts)])
        return {"task": task_id, "asked": asked, "answered": answered}
    if name == "get":
        agent, task = args
        client = await client_for(base, agent)
        return task_json(await client.get_task(GetTaskRequest(id=task)))
    if name == "cancel":
        agent, task = args
        client = await client_for(base, agent)
        return task_json(await client.cancel_task(CancelTaskRequest(id=task)))
    if name == "input":
        agent, text, answer = args
        client = await client_for(base, agent, streaming=False)
        asked = await first_task(client, message(text))
        answered = await first_task(
            client, message(answer, task_id=asked.id, context_id=asked.context_id)
        )
        return {"asked": task_json(asked), "answered": task_json(answered)}
    raise SystemExit(f"unknown step {name}")


async def main():
    base, name, *args = sys.argv[1:]
    try:
        out = await step(base.rstrip("/"), name, args)
    except Exception as error:  # the SDK's typed errors are the point
        out = {"error": type(error).__name__, "message": str(error)}
    print(json.dumps(out))


asyncio.run(main())
