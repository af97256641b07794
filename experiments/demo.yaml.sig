{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiJmYzlhN2ZhMjUxZmUzMWI1ZGMzN2VlMTUzYmU4MDhlNjBlZTk2YTFmM2Y3NzRiZDZjMmI0YzNmM2YwNDQyM2FmIn0sIm5hbWUiOiJkZW1vLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "1C75NdOuUhT1gAO7zBs2Ko4AFMnxbClJ75GBoboPh+JXu1PSmj3fQwlGZCAhTqbf0IcRi1nipf1/yh741+6XBg==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
