{
  "payloadType": "application/vnd.in-toto+json",
  "payload": "eyJfdHlwZSI6Imh0dHBzOi8vaW4tdG90by5pby9TdGF0ZW1lbnQvdjEiLCJwcmVkaWNhdGUiOnsia2l0IjoibWFuaWZlc3QifSwicHJlZGljYXRlVHlwZSI6InVybjpraXQ6bWFuaWZlc3QtYXBwcm92YWw6MSIsInN1YmplY3QiOlt7ImRpZ2VzdCI6eyJzaGEyNTYiOiIxYzdkNzVmNTY1YTQ4ZmY5MWNlOTQ3OTRiNjBkM2QzNWE1OTIzZjY0MzVmOWUxZmE3ZWYyMGRiNGJiNjM3Y2Q0In0sIm5hbWUiOiJ0cmFuc2Zvcm1lcnMtaDIwMC1iYXRjaGVkX21tLnlhbWwifV19",
  "signatures": [
    {
      "keyid": "SHA256:+7JblY1FdA9i3H5v5xHFp5RlvuS2IFBmP4Kwmrl738s",
      "sig": "jm3OQ2qwHEhgo93YwwDW24E5b6UpNzYgQ9RKE6EozZoZIJ+LrRJXSB4NDiRPRshF7OD3rMllQUD98Ajb8Tw+Cw==",
      "publicKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52 kit-example"
    }
  ]
}
