"""A complete agent in 15 lines: run it with `agentbus run examples.greeter:Greeter`."""

from pydantic import BaseModel

from agentbus import Agent, skill


class Greeting(BaseModel):
    text: str
    length: int


class Greeter(Agent):
    name = "greeter"
    description = "Greets people by name"

    @skill
    async def greet(self, who: str, shout: bool = False) -> Greeting:
        """Say hello to someone."""
        text = f"hello, {who}!"
        return Greeting(text=text.upper() if shout else text, length=len(text))
