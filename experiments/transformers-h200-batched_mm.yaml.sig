{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiIxYTgwODJmNWYxYzBhZTc4OWU1NmI5NWNjN2U0Zjg3YTUyMzU0NWJiYjNhN2RlNzFlNWVlYzMwODg4NmFmMWRmIn0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtaDIwMC1iYXRjaGVkX21tLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "pvjjFtRuWWVDmekdydxk8DuzMUMWraGi4ivBLmD+AowrutlhuyEDehqzEYFV4p+nR8FzscblQkEDYhZ8RpTqAQ==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
