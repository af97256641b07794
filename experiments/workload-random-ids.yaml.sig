{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiI3N2JlMTQ4NDg3ZjI4ZjA1YzhjZjY1OGVjYzFhOWJmYWQ3ZmY4NDNkNzljYjJjZGNjMDgyYWE3MDMwZWRlZjE4In0sIm5hbWUiOiJ3b3JrbG9hZC1yYW5kb20taWRzLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "EdK+rbCjFaf6oe/+dZ64NMQ/1Ilx9jura/bP+sU7kp+GDLM6iMhIGQ6qeeUCePg2Au14yYJge+lXGLEyrQMdDA==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
